# tests/ops_gpu_ops.cmake — conv1d, gated RMSNorm and the decode steps on the OpenCL backend
# (tests/gpu/test_opencl_ops.c; PoCL in CI). Exit code 77 = no OpenCL device: skipped.
add_executable(test_opencl_ops gpu/test_opencl_ops.c)
target_include_directories(test_opencl_ops PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(test_opencl_ops PRIVATE mamba2c_test_harness)
add_test(NAME opencl_ops COMMAND test_opencl_ops)
set_tests_properties(opencl_ops PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77 LABELS "gpu;opencl")
target_include_directories(test_opencl_ops PRIVATE ${PROJECT_SOURCE_DIR}/src) # opencl/cl_api.h
target_link_libraries(test_opencl_ops PRIVATE ${CMAKE_DL_LIBS})
# the same units on the CUDA backend (host mode): skipped (77) where no GPU and driver exist
add_test(NAME cuda_ops COMMAND test_opencl_ops --backend cuda)
set_tests_properties(cuda_ops PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77 LABELS "gpu;cuda")
