# Gated RMSNorm tests (SPEC §5); included from tests/CMakeLists.txt.
# `test_rmsnorm --bench` times the CPU op at M=2048, D=5120 against memcpy (not run by ctest).
add_executable(test_rmsnorm test_rmsnorm.c)
target_link_libraries(test_rmsnorm PRIVATE mamba2c_test_harness)
add_test(NAME rmsnorm COMMAND test_rmsnorm -q)
set_tests_properties(rmsnorm PROPERTIES TIMEOUT 300)
