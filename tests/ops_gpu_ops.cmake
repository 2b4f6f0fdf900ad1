# tests/ops_gpu_ops.cmake — conv1d, gated RMSNorm and the decode steps on the OpenCL backend
# (test_ops of tests/ops/, ops_test_ops.cmake; PoCL in CI), with the OpenCL device-memory mode.
# Exit code 77 = no OpenCL device: skipped.
add_test(NAME opencl_ops COMMAND test_ops --backend opencl
         --op conv1d,rmsnorm,conv1d_step,ssd_step,device)
set_tests_properties(opencl_ops PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77 LABELS "gpu;opencl")
# the same units on the CUDA backend (host mode): skipped (77) where no GPU and driver exist
add_test(NAME cuda_ops COMMAND test_ops --backend cuda --op conv1d,rmsnorm,conv1d_step,ssd_step)
set_tests_properties(cuda_ops PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77 LABELS "gpu;cuda")
