# tests/ops_conv1d_step_contig.cmake — conv1d_step on contiguous caches (the in-place kernel).
add_executable(test_conv1d_step_contig test_conv1d_step_contig.c)
target_link_libraries(test_conv1d_step_contig PRIVATE mamba2c_test_harness)
add_test(NAME conv1d_step_contig COMMAND test_conv1d_step_contig)
set_tests_properties(conv1d_step_contig PROPERTIES TIMEOUT 600)
