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
  ${PROJECT_SOURCE_DIR}/src/gpu/kernels/ssd_bwd.cl
  ${PROJECT_SOURCE_DIR}/src/gpu/kernels/conv1d.cl
  ${PROJECT_SOURCE_DIR}/src/gpu/kernels/rmsnorm.cl
  ${PROJECT_SOURCE_DIR}/src/gpu/kernels/step.cl
  ${PROJECT_SOURCE_DIR}/src/gpu/kernels/tables.cl
  # @@ more kernel files go above this line @@
)
set(MAMBA2C_GPU_SRC ${CMAKE_CURRENT_BINARY_DIR}/gpu_kernel_sources.c)
string(REPLACE ";" "," MAMBA2C_GPU_KERNEL_LIST "${MAMBA2C_GPU_KERNEL_FILES}")
add_custom_command(OUTPUT ${MAMBA2C_GPU_SRC}
  COMMAND ${CMAKE_COMMAND} -DOUT=${MAMBA2C_GPU_SRC} -DNAME=m2g_kernel_sources
          -DFILES=${MAMBA2C_GPU_KERNEL_LIST} -P ${PROJECT_SOURCE_DIR}/cmake/embed.cmake
  DEPENDS ${MAMBA2C_GPU_KERNEL_FILES} ${PROJECT_SOURCE_DIR}/cmake/embed.cmake
  COMMENT "Embedding the GPU kernel sources" VERBATIM)
# every kernel's parameter kinds, from its prototype: the launch check of gpu_common.c
set(MAMBA2C_GPU_SIGS ${CMAKE_CURRENT_BINARY_DIR}/gpu_kernel_sigs.c)
# (the CUDA-only tensor-core kernels too: their prototypes are text, read on every build)
set(MAMBA2C_GPU_PROTO_FILES ${MAMBA2C_GPU_KERNEL_FILES}
  ${PROJECT_SOURCE_DIR}/src/cuda/ssd_tc.cuh ${PROJECT_SOURCE_DIR}/src/cuda/ssd_tc_bwd.cuh)
string(REPLACE ";" "," MAMBA2C_GPU_PROTO_LIST "${MAMBA2C_GPU_PROTO_FILES}")
add_custom_command(OUTPUT ${MAMBA2C_GPU_SIGS}
  COMMAND ${CMAKE_COMMAND} -DOUT=${MAMBA2C_GPU_SIGS} -DFILES=${MAMBA2C_GPU_PROTO_LIST}
          -DLIST=${PROJECT_SOURCE_DIR}/src/gpu/kernels/list.h
          -DTC_LIST=${PROJECT_SOURCE_DIR}/src/cuda/tc_list.h
          -P ${PROJECT_SOURCE_DIR}/cmake/kernel_sigs.cmake
  DEPENDS ${MAMBA2C_GPU_PROTO_FILES} ${PROJECT_SOURCE_DIR}/src/gpu/kernels/list.h
          ${PROJECT_SOURCE_DIR}/src/cuda/tc_list.h ${PROJECT_SOURCE_DIR}/cmake/kernel_sigs.cmake
  COMMENT "Reading the GPU kernel signatures" VERBATIM)
# one typed launcher per kernel, <build>/gpu_launch/<kernel file>.h (M2G_LAUNCH of gpu.h)
set(MAMBA2C_GPU_LAUNCH_DIR ${CMAKE_CURRENT_BINARY_DIR}/gpu_launch)
set(MAMBA2C_GPU_LAUNCHERS "")
foreach(f ${MAMBA2C_GPU_PROTO_FILES})
  get_filename_component(stem "${f}" NAME_WE)
  if(NOT stem STREQUAL "common")
    list(APPEND MAMBA2C_GPU_LAUNCHERS ${MAMBA2C_GPU_LAUNCH_DIR}/${stem}.h)
  endif()
endforeach()
add_custom_command(OUTPUT ${MAMBA2C_GPU_LAUNCHERS}
  COMMAND ${CMAKE_COMMAND} -DOUT_DIR=${MAMBA2C_GPU_LAUNCH_DIR} -DFILES=${MAMBA2C_GPU_PROTO_LIST}
          -P ${PROJECT_SOURCE_DIR}/cmake/kernel_launchers.cmake
  DEPENDS ${MAMBA2C_GPU_PROTO_FILES} ${PROJECT_SOURCE_DIR}/cmake/kernel_launchers.cmake
          ${PROJECT_SOURCE_DIR}/cmake/kernel_sigs.cmake
  COMMENT "Writing the typed GPU kernel launchers" VERBATIM)
add_custom_target(mamba2c_gpu_launchers DEPENDS ${MAMBA2C_GPU_LAUNCHERS})
add_dependencies(mamba2c_objs mamba2c_gpu_launchers)
target_include_directories(mamba2c_objs PRIVATE ${CMAKE_CURRENT_BINARY_DIR})
target_sources(mamba2c_objs PRIVATE
  ${MAMBA2C_GPU_SIGS}
  src/gpu/gpu_common.c
  src/gpu/ssd_ops.c
  src/gpu/ssd_bwd.c
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

# CUDA: on by default where nvcc is found. nvcc compiles the same kernel files (through
# src/cuda/kernels.cu) into a fat binary for sm_80 and sm_90 (+ compute_90 PTX) that is
# embedded into the library; src/cuda/cuda.c loads it through a dlopen'ed libcuda.so.1, so
# the library neither links nor needs libcuda/cudart at load time. A failing nvcc compile
# fails the build.
find_program(MAMBA2C_NVCC nvcc HINTS /usr/local/cuda/bin $ENV{CUDA_HOME}/bin)
if(MAMBA2C_NVCC)
  set(MAMBA2C_CUDA_DEFAULT ON)
else()
  set(MAMBA2C_CUDA_DEFAULT OFF)
endif()
option(MAMBA2C_CUDA "Build the CUDA backend (needs nvcc; runs where an NVIDIA driver is)"
       ${MAMBA2C_CUDA_DEFAULT})
if(MAMBA2C_CUDA)
  if(NOT MAMBA2C_NVCC)
    message(FATAL_ERROR "MAMBA2C_CUDA=ON but nvcc was not found")
  endif()
  set(MAMBA2C_CUDA_ARCH_FLAGS
    -gencode=arch=compute_80,code=sm_80
    -gencode=arch=compute_90,code=sm_90
    -gencode=arch=compute_90,code=compute_90)
  set(MAMBA2C_FATBIN ${CMAKE_CURRENT_BINARY_DIR}/mamba2c_kernels.fatbin)
  set(MAMBA2C_FATBIN_SRC ${CMAKE_CURRENT_BINARY_DIR}/cuda_fatbin.c)
  add_custom_command(OUTPUT ${MAMBA2C_FATBIN}
    COMMAND ${MAMBA2C_NVCC} -fatbin -O3 ${MAMBA2C_CUDA_ARCH_FLAGS} -Werror all-warnings
            -o ${MAMBA2C_FATBIN} ${PROJECT_SOURCE_DIR}/src/cuda/kernels.cu
    DEPENDS ${PROJECT_SOURCE_DIR}/src/cuda/kernels.cu ${MAMBA2C_GPU_KERNEL_FILES}
            ${PROJECT_SOURCE_DIR}/src/cuda/ssd_tc.cuh ${PROJECT_SOURCE_DIR}/src/cuda/tc_tiles.h
            ${PROJECT_SOURCE_DIR}/src/cuda/ssd_tc_bwd.cuh ${PROJECT_SOURCE_DIR}/src/cuda/tc_list.h
    COMMENT "nvcc: the GPU kernels for sm_80, sm_90" VERBATIM)
  add_custom_command(OUTPUT ${MAMBA2C_FATBIN_SRC}
    COMMAND ${CMAKE_COMMAND} -DOUT=${MAMBA2C_FATBIN_SRC} -DNAME=m2g_cuda_fatbin -DBINARY=1
            -DFILES=${MAMBA2C_FATBIN} -P ${PROJECT_SOURCE_DIR}/cmake/embed.cmake
    DEPENDS ${MAMBA2C_FATBIN} ${PROJECT_SOURCE_DIR}/cmake/embed.cmake
    COMMENT "Embedding the CUDA fat binary" VERBATIM)
  target_sources(mamba2c_objs PRIVATE src/cuda/cuda.c src/cuda/backend.c src/cuda/ssd_tc.c
                 ${MAMBA2C_FATBIN_SRC})
  target_compile_definitions(mamba2c_objs PRIVATE MAMBA2C_HAVE_CUDA)
endif()
include(cmake/cuda_emu.cmake) # the emulated CUDA device of the test suite
