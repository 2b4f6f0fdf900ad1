# Mamba-2 block decode step tests (mamba2_block_step: the CPU backend and the reference fed
# f32 against the single ops composed in float64; bitwise equal to the ops one by one and
# across thread counts; invalid arguments); included from tests/CMakeLists.txt.
add_executable(test_block_step test_block_step.c)
target_link_libraries(test_block_step PRIVATE mamba2c_test_harness)
add_test(NAME block_step COMMAND test_block_step -q)
set_tests_properties(block_step PROPERTIES TIMEOUT 300)
