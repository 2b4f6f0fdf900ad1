# tests/ops_ssd_step.cmake — the SSD decode step tests (included from tests/CMakeLists.txt).
add_executable(test_ssd_step test_ssd_step.c)
target_link_libraries(test_ssd_step PRIVATE mamba2c_test_harness)
add_test(NAME ssd_step COMMAND test_ssd_step)
set_tests_properties(ssd_step PROPERTIES TIMEOUT 600)
