# Decode linear layer tests (mamba2_linear_forward: f32, bf16 and Q8_0 weights on every CPU
# kernel set against the float64 reference); included from tests/CMakeLists.txt.
add_executable(test_linear test_linear.c)
target_link_libraries(test_linear PRIVATE mamba2c_test_harness)
add_test(NAME linear COMMAND test_linear -q)
set_tests_properties(linear PROPERTIES TIMEOUT 300)
# Q8_0 weights with integer activations (quantize_x) on every CPU kernel set
add_executable(test_linear_q8x test_linear_q8x.c)
target_link_libraries(test_linear_q8x PRIVATE mamba2c_test_harness)
add_test(NAME linear_q8x COMMAND test_linear_q8x -q)
set_tests_properties(linear_q8x PROPERTIES TIMEOUT 300)
