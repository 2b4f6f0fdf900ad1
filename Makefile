# Convenience wrapper around CMake: the README's two commands.
#   make demo   build (Release) and run the demo: Mamba-2 SSD forward + backward, accuracy + speed
#   make test   build and run the whole test suite: the C tests normally and under ASan + UBSan,
#               a bounded libFuzzer run (test-fuzz), cross-built for AArch64 under qemu
#               (test-arm), then the Python suite (creates .venv with torch from PyPI on
#               first use)
#   make test-fuzz  fuzz every entry point for FUZZ_TIME seconds (default 180) from the seed
#               corpus (clang + libFuzzer, installed from Debian when missing)
BUILD ?= build
SAN_BUILD ?= build-san
ARM_BUILD ?= build-arm
FUZZ_BUILD ?= build-fuzz
FUZZ_TIME ?= 180
# test-arm's Debian packages: the cross compiler, the target's libc, the user-mode emulator
ARM_PKGS = gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static
JOBS ?= $(shell nproc 2>/dev/null || echo 2)

.PHONY: all demo test test-fast test-san test-fuzz test-arm test-python bench bench-plot install clean opencl-device

all:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD) -j $(JOBS)

# The demo builds what it runs: the library and the demo program (test-fast builds the rest).
demo:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD) -j $(JOBS) --target mamba2c mamba2c-demo
	./$(BUILD)/examples/mamba2c-demo

# The OpenCL tests need an OpenCL device: when `clinfo -l` lists none, install PoCL (OpenCL on
# the CPU) so that they run instead of being skipped (needs root and apt-get, as in CI).
opencl-device:
	@if clinfo -l 2>/dev/null | grep -q 'Device'; then :; \
	elif command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  echo "no OpenCL device: installing PoCL"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    pocl-opencl-icd ocl-icd-opencl-dev opencl-headers clinfo >/dev/null; \
	else echo "warning: no OpenCL device and cannot install PoCL: the OpenCL tests will skip"; fi

test-fast: all opencl-device
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The sanitizer build leaves nvcc out (-DMAMBA2C_CUDA=OFF, as on a machine without nvcc):
# test-fast already compiles and checks the fat binary, and nvcc's pass is minutes of CI. The
# CUDA host layer is still built here (with an empty image) for the emulated device, so ASan and
# UBSan check it and the kernels' host build in the cuda_emu tests (docs/gpu.md §5c).
# It is built at -O1 with line tables (-g1): the sanitized SIMD kernel files compile several
# times faster than at RelWithDebInfo's -O2 -g (docs/ci_time.md).
SAN_FLAGS = -O1 -g1 -DNDEBUG
test-san: opencl-device
	cmake -S . -B $(SAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS_RELWITHDEBINFO="$(SAN_FLAGS)" \
	    -DMAMBA2C_SANITIZE=ON -DMAMBA2C_BUILD_BENCH=OFF -DMAMBA2C_CUDA=OFF
	cmake --build $(SAN_BUILD) -j $(JOBS)
	cd $(SAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j $(JOBS)

# AArch64: cross-compile with cmake/aarch64-linux-gnu.cmake and run the C suite under
# qemu-aarch64-static, first with the NEON kernel set (the default there; the programs also
# force the scalar set), then with MAMBA2C_ISA=scalar capping it. The emulated run uses the
# reduced mode (MAMBA2C_TEST_REDUCED, docs/architecture.md). Installs ARM_PKGS where missing.
test-arm:
	@if ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v qemu-aarch64-static >/dev/null \
	    || [ ! -e /usr/aarch64-linux-gnu/lib/libc.so.6 ]; then \
	  SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  echo "test-arm: installing $(ARM_PKGS)"; \
	  $$SUDO apt-get update && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y $(ARM_PKGS); \
	fi
	cmake -S . -B $(ARM_BUILD) -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DCMAKE_BUILD_TYPE=Release
	cmake --build $(ARM_BUILD) -j $(JOBS)
	cd $(ARM_BUILD) && ctest --output-on-failure -j $(JOBS)
	cd $(ARM_BUILD) && MAMBA2C_ISA=scalar ctest --output-on-failure -j $(JOBS)

# The Python suite on the pinned environment (python/constraints.txt), then the tests that
# use transformers again on its previous release (python/constraints-hf-prev.txt, installed
# --no-deps into .venv/hf-prev and put first on PYTHONPATH); first, the dry run of the one-shot
# GPU check (its plumbing on the CPU: bench/gpu_check.sh, bench/gpu_compare.py).
HF_TESTS = python/tests/test_hf_transformers.py python/tests/test_hf_families.py \
    python/tests/test_hf_linear.py \
    python/tests/test_cold_compile.py::test_compile_hf_model_fullgraph_from_cold_start \
    python/tests/test_step_layouts.py::test_hf_decode_takes_the_c_steps
HF_PREV = $(shell sed -n 's/^transformers==//p' python/constraints-hf-prev.txt)
HF_PIN = $(shell sed -n 's/^transformers==//p' python/constraints.txt)
test-python: all opencl-device
	MAMBA2C_SKIP_BUILD=1 bash python/setup_env.sh
	@echo "test-python: the one-shot GPU check's dry run (bench/gpu_check.sh --cpu-dry-run)"
	bash bench/gpu_check.sh --cpu-dry-run --skip-build --build-dir $(BUILD) \
	    --python .venv/bin/python --out $(BUILD)/gpu_check_dry
	MAMBA2C_EXPECT_TRANSFORMERS=$(HF_PIN) MAMBA2C_LIBRARY=$(CURDIR)/$(BUILD)/libmamba2c.so \
	    .venv/bin/python -m pytest python/tests -q
	@echo "test-python: the transformers tests again, on transformers $(HF_PREV)"
	PYTHONPATH=$(CURDIR)/.venv/hf-prev MAMBA2C_EXPECT_TRANSFORMERS=$(HF_PREV) \
	    MAMBA2C_LIBRARY=$(CURDIR)/$(BUILD)/libmamba2c.so .venv/bin/python -m pytest $(HF_TESTS) -q

test-fuzz: opencl-device
	FUZZ_TIME=$(FUZZ_TIME) JOBS=$(JOBS) bash tests/fuzz/run_fuzz.sh $(CURDIR)/$(FUZZ_BUILD)

test: test-san test-fuzz test-fast test-arm test-python

# Benchmarks (not part of the tests): the smoke suite with backward and the memory-bound ops,
# and the standard-suite chart + side-by-side table of the README (several minutes).
bench: all
	./$(BUILD)/bench/mamba2c-bench --suite smoke --features all --backward --ops

bench-plot: all
	MAMBA2C_SKIP_BUILD=1 bash python/setup_env.sh
	./$(BUILD)/bench/mamba2c-bench --suite standard --features all --json $(BUILD)/bench_standard.json
	.venv/bin/python bench/plot.py $(BUILD)/bench_standard.json -o docs/bench_standard.png
	MAMBA2C_LIBRARY=$(CURDIR)/$(BUILD)/libmamba2c.so .venv/bin/python bench/side_by_side.py --suite smoke --backward

install: all
	cmake --install $(BUILD) $(if $(PREFIX),--prefix $(PREFIX),)

clean:
	rm -rf $(BUILD) $(SAN_BUILD) $(ARM_BUILD) $(FUZZ_BUILD)
