# gpu.cmake — the GPU backends (included from CMakeLists.txt after the library targets).
#
# OpenCL: always built. It needs no OpenCL headers or library at build time (src/opencl/
# declares the ABI it uses and opens libOpenCL.so.1 with dlopen at run time), so every
# machine builds it and a machine without a driver reports BACKEND_UNAVAILABLE.
# The kernel files are embedded into the library as text (cmake/embed.cmake) and compiled by
# the OpenCL driver when a context is created.
set(MAMBA2C_GPU_KERNEL_FILES
  ${PROJECT_SOURCE_DIR}/src/gpu/kernels/common.h
  ${PROJECT_SOURCE_DIR}/src/gpu/kernels/ssd_chunked.cl
  ${PROJECT_SOURCE_DIR}/src/gpu/kernels/conv1d.cl
  ${PROJECT_SOURCE_DIR}/src/gpu/kernels/rmsnorm.cl
  ${PROJECT_SOURCE_DIR}/src/gpu/kernels/step.cl
  # @@ more kernel files go above this line @@
)
set(MAMBA2C_GPU_SRC ${CMAKE_CURRENT_BINARY_DIR}/gpu_kernel_sources.c)
string(REPLACE ";" "," MAMBA2C_GPU_KERNEL_LIST "${MAMBA2C_GPU_KERNEL_FILES}")
add_custom_command(OUTPUT ${MAMBA2C_GPU_SRC}
  COMMAND ${CMAKE_COMMAND} -DOUT=${MAMBA2C_GPU_SRC} -DNAME=m2g_kernel_sources
          -DFILES=${MAMBA2C_GPU_KERNEL_LIST} -P ${PROJECT_SOURCE_DIR}/cmake/embed.cmake
  DEPENDS ${MAMBA2C_GPU_KERNEL_FILES} ${PROJECT_SOURCE_DIR}/cmake/embed.cmake
  COMMENT "Embedding the GPU kernel sources" VERBATIM)
target_sources(mamba2c_objs PRIVATE
  src/gpu/gpu_common.c
  src/gpu/ssd_ops.c
  src/opencl/opencl.c
  src/opencl/backend.c
  ${MAMBA2C_GPU_SRC}
  src/gpu/ops_conv1d.c
  src/gpu/ops_rmsnorm.c
  src/gpu/ops_step.c
  # @@ more GPU host files go above this line @@
)
foreach(t mamba2c mamba2c_static)
  target_link_libraries(${t} PUBLIC ${CMAKE_DL_LIBS})
endforeach()
