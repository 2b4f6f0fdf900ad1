# tests/ops_conv1d.cmake — the causal depthwise conv1d tests (included from tests/CMakeLists.txt).
add_executable(test_conv1d test_conv1d.c)
target_link_libraries(test_conv1d PRIVATE mamba2c_test_harness)
add_test(NAME conv1d COMMAND test_conv1d)
set_tests_properties(conv1d PROPERTIES TIMEOUT 600)
