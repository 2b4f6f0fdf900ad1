# tests/ops_conv1d.cmake — the causal depthwise conv1d tests (included from tests/CMakeLists.txt).
# One program from four files: the oracle, gradcheck, determinism units and main
# (test_conv1d.c), the shared problems and instances (conv1d_inst.c), the parity and step units
# (conv1d_parity.c) and the error units (conv1d_errors.c).
add_executable(test_conv1d test_conv1d.c conv1d_inst.c conv1d_parity.c conv1d_errors.c)
target_link_libraries(test_conv1d PRIVATE mamba2c_test_harness)
add_test(NAME conv1d COMMAND test_conv1d)
set_tests_properties(conv1d PROPERTIES TIMEOUT 600)
