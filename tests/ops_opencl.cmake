# tests/ops_opencl.cmake — the GPU kernels on the OpenCL backend (PoCL in CI; included from
# tests/CMakeLists.txt). Exit code 77 = no OpenCL device at all (SKIPPED); `make test`
# installs PoCL first so that CI never skips it.
add_executable(test_opencl_ssd gpu/test_opencl_ssd.c)
target_include_directories(test_opencl_ssd PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(test_opencl_ssd PRIVATE mamba2c_test_harness)
add_test(NAME opencl_ssd COMMAND test_opencl_ssd -q)
set_tests_properties(opencl_ssd PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77 LABELS "gpu;opencl")
