# Gated RMSNorm tests (SPEC §5); included from tests/CMakeLists.txt.
# `test_rmsnorm --bench` times the CPU op at M=2048, D=5120 against memcpy (not run by ctest).
# One program from four files: the tests and main (test_rmsnorm.c), the shared instances
# (rmsnorm_inst.c), the api_* units (rmsnorm_api.c) and the --bench mode (rmsnorm_bench.c).
add_executable(test_rmsnorm test_rmsnorm.c rmsnorm_inst.c rmsnorm_api.c rmsnorm_bench.c)
target_link_libraries(test_rmsnorm PRIVATE mamba2c_test_harness)
add_test(NAME rmsnorm COMMAND test_rmsnorm -q)
set_tests_properties(rmsnorm PROPERTIES TIMEOUT 300)
