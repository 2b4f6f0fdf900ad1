# tests/ops_ssd_positions.cmake — states after chosen tokens (included from tests/CMakeLists.txt).
add_executable(test_ssd_positions test_ssd_positions.c)
target_link_libraries(test_ssd_positions PRIVATE mamba2c_test_harness)
add_test(NAME ssd_positions COMMAND test_ssd_positions)
set_tests_properties(ssd_positions PROPERTIES TIMEOUT 600)
