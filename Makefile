# Entry points. The README's two commands:
#   ./scripts/setup.sh && make run    build and run the main job
#   ./scripts/setup.sh && make test   build and run every test (as CI does)
BUILD ?= build
ASAN_BUILD ?= build-asan
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all build run test unit-test asan-test format format-check clean

all: build

build:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DTITAN_WERROR=ON $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

# The main job. Until the trainer lands it is the op benchmark.
run: build
	$(BUILD)/bin/titan bench ops

unit-test: build
	cd $(BUILD) && ctest -j $(JOBS) --output-on-failure --timeout 900

# Unit tests again under AddressSanitizer + UndefinedBehaviorSanitizer (no CUDA).
asan-test:
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTITAN_WERROR=ON -DTITAN_SANITIZE=ON $(CMAKE_FLAGS)
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
		ctest -j $(JOBS) --output-on-failure --timeout 1800 -R '^(core|ops\.baseline|ops\.avx512|autograd|nn|data)\.'

format:
	git ls-files '*.h' '*.cpp' '*.cu' '*.cuh' | xargs clang-format -i

format-check:
	@if command -v clang-format >/dev/null; then \
		git ls-files '*.h' '*.cpp' '*.cu' '*.cuh' | xargs clang-format --dry-run --Werror && echo "format: clean"; \
	else echo "format: clang-format not installed, check skipped"; fi

test: unit-test asan-test format-check

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
