# tests/ops_ssd_outx.cmake — options.out_x, the output before the gate (included from tests/CMakeLists.txt).
add_executable(test_ssd_outx test_ssd_outx.c)
target_link_libraries(test_ssd_outx PRIVATE mamba2c_test_harness)
add_test(NAME ssd_outx COMMAND test_ssd_outx -q)
set_tests_properties(ssd_outx PROPERTIES TIMEOUT 600)
