# SiLU, silu' and the silu gate over the whole float range (below the vector exp clamps) in
# every op that applies them, on every kernel set the CPU has (test_silu_saturation.c).
add_executable(test_silu_saturation test_silu_saturation.c)
target_link_libraries(test_silu_saturation PRIVATE mamba2c_test_harness)
add_test(NAME silu_saturation COMMAND test_silu_saturation)
set_tests_properties(silu_saturation PROPERTIES TIMEOUT 120)
