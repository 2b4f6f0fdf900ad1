# tests/ops_step_layouts.cmake — the decode steps on the standard cache layouts: conv1d_step
# with [S,C,Lc] caches of any strides and cache_seqlens, ssd_step with bf16/f16 states
# (included from tests/CMakeLists.txt). The OpenCL variant runs on PoCL in CI (77 = no device).
add_executable(test_step_layouts test_step_layouts.c)
target_link_libraries(test_step_layouts PRIVATE mamba2c_test_harness)
add_test(NAME step_layouts COMMAND test_step_layouts -q)
set_tests_properties(step_layouts PROPERTIES TIMEOUT 600)
add_test(NAME step_layouts_opencl COMMAND test_step_layouts --backend opencl -q)
set_tests_properties(step_layouts_opencl PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77
                     LABELS "gpu;opencl")
# BF16/F16 activations in both decode steps, against the float64 reference (CPU backend)
add_executable(test_step_half test_step_half.c)
target_link_libraries(test_step_half PRIVATE mamba2c_test_harness)
target_include_directories(test_step_half PRIVATE ${PROJECT_SOURCE_DIR}/src)
add_test(NAME step_half COMMAND test_step_half -q)
set_tests_properties(step_half PROPERTIES TIMEOUT 600)
