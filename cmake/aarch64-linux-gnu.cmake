# Cross-compiling mamba2c for AArch64 Linux with Debian's gcc-aarch64-linux-gnu, the tests run
# under user-mode emulation (qemu-user-static):
#   cmake -S . -B build-arm -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
#   cmake --build build-arm -j2 && (cd build-arm && ctest)
# (`make test-arm` does this, installing the three Debian packages where missing.)
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(MAMBA2C_CROSS_PREFIX aarch64-linux-gnu-)
set(CMAKE_C_COMPILER ${MAMBA2C_CROSS_PREFIX}gcc)

# The target's libraries and headers (libc6-dev-arm64-cross) only, never the host's.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# ctest (and add_test commands) run target programs through the emulator; -L points it at the
# target's dynamic loader and libraries.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64-static;-L;/usr/aarch64-linux-gnu)
