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
