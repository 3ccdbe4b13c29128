# Entry points. The README's two commands:
#   ./scripts/setup.sh && make run    build and run the main job
#   ./scripts/setup.sh && make test   build and run every test (as CI does)
SHELL := /bin/bash
BUILD ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
TIDY_BUILD ?= build-tidy
FUZZ_BUILD ?= build-fuzz
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all configure build cli run test unit-test asan-test tsan-test tidy fuzz fuzz-one format format-check package \
	bench-profiler clean

all: build

configure:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DTITAN_WERROR=ON $(CMAKE_FLAGS)

# Everything, tests and their PyTorch reference cases included.
build: configure
	cmake --build $(BUILD) -j $(JOBS)

# Just the titan executable (build/bin/titan).
cli: configure
	cmake --build $(BUILD) -j $(JOBS) --target titan_cli

# The main job: llama3 debugmodel on the embedded fortunes corpus, with a
# 2048-token BPE trained on it (prepared once into data/fortunes).
DATA ?= data/fortunes
run: cli
	@[ -f $(DATA)/manifest.json ] || $(BUILD)/bin/titan data prepare --train-tokenizer 2048 --output $(DATA)
	$(BUILD)/bin/titan train --config configs/llama3_debug.toml

# Each stage's time on 2 cores: docs/testing.md, "Stages and their times".
test: unit-test asan-test tsan-test fuzz tidy format-check

# Each suite runs once in the chain: the CPU suites that asan-test runs (core, the
# ops' CPU kernel sets, autograd, nn, data, the signal tests) run there only, under
# the sanitizers; this stage runs the rest (trainer, models, integration, which drive
# every op at -O3 again, the distributed suites, whose NCCL refusal differs in a CUDA
# build, and every CUDA test). `make unit-test SANITIZED_SUITES=` runs everything here.
SANITIZED_SUITES ?= ^(core|ops\.(baseline|avx2|avx512)|autograd|nn|data|integration\.Signals)\.
unit-test: build
	cd $(BUILD) && ctest -j $(JOBS) --output-on-failure --timeout 900 $(if $(SANITIZED_SUITES),-E '$(SANITIZED_SUITES)')

# The CPU unit suites, the distributed ones and the signal tests under AddressSanitizer
# + UndefinedBehaviorSanitizer (no CUDA); only what those suites run is built. -O1 with line tables (-g1) compiles faster than
# RelWithDebInfo's -O2 -g and still names file:line in every report; the PyTorch
# reference cases are read from the main build rather than made again.
SANITIZE_FLAGS = -O1 -g1 -DNDEBUG
# The random-moment SIGTERM test stops 20 jobs here, not its 50 (2.5 s each under ASan;
# the signal storm beside it sends thousands of signals).
ASAN_SIGNAL_RUNS ?= 20
ASAN_TARGETS = titan_cli titan_core_tests titan_ops_tests titan_autograd_tests titan_nn_tests titan_data_tests \
	titan_distributed_tests titan_distributed_local_tests titan_fault_job titan_signal_tests
asan-test: configure
	cmake --build $(BUILD) -j $(JOBS) --target titan_reference_cases
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTITAN_WERROR=ON -DTITAN_SANITIZE=ON \
		-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$(SANITIZE_FLAGS)" \
		-DTITAN_REFERENCE_CASES_DIR=$(abspath $(BUILD))/reference_cases $(CMAKE_FLAGS)
	cmake --build $(ASAN_BUILD) -j $(JOBS) --target $(ASAN_TARGETS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 TITAN_SIGNAL_TEST_RUNS=$(ASAN_SIGNAL_RUNS) \
		ctest -j $(JOBS) --output-on-failure --timeout 1800 -R '^(core|ops|autograd|nn|data|distributed|integration\.Signals)\.'

# The tests whose subject runs threads beside training, under ThreadSanitizer in a
# tree of their own: the async checkpoint writer and the signal thread
# (tests/threads, and the signal tests' real jobs), the data loader's prefetch, the MPI
# process groups' workers and the stall census (the distributed tests). OpenMP runs
# one thread: libgomp is not instrumented, so its own synchronisation would look like
# races. Reports inside Open MPI's own threads are suppressed (tests/tsan.supp).
# The twenty-moment SIGTERM test is left to the other stages: under TSan it takes
# seven minutes to add nothing the signal storm does not already exercise. The
# 16-48 MiB all-reduces (distributed.np*.LargeCollectives) are left out too: under
# TSan one outlasts the collective timeout, and their threading is the small ones'.
# Which kernel set runs does not change any of that threading, so the tree compiles
# only the baseline set (TITAN_CPU_ISAS), not all three: about 80 s less on 2 cores.
TSAN_TARGETS = titan_cli titan_thread_tests titan_data_tests titan_distributed_tests \
	titan_distributed_local_tests titan_fault_job titan_signal_tests
tsan-test: configure
	cmake --build $(BUILD) -j $(JOBS) --target titan_reference_cases
	cmake -S . -B $(TSAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTITAN_WERROR=ON -DTITAN_TSAN=ON \
		-DTITAN_CPU_ISAS=baseline \
		-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$(SANITIZE_FLAGS)" \
		-DTITAN_REFERENCE_CASES_DIR=$(abspath $(BUILD))/reference_cases $(CMAKE_FLAGS)
	cmake --build $(TSAN_BUILD) -j $(JOBS) --target $(TSAN_TARGETS)
	cd $(TSAN_BUILD) && OMP_NUM_THREADS=1 \
		TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(abspath tests/tsan.supp)" \
		ctest -j $(JOBS) --output-on-failure --timeout 1800 \
		-R '^(threads\.|data\.DataLoader|distributed\.|integration\.Signals\.)' -E 'AtRandomMoments|LargeCollectives'

# clang-tidy over src/ with the curated checks of .clang-tidy (warnings are
# errors), on a compile database of the libraries' batched (unity) sources:
# each batch parses the shared headers once (tests/lint/clang_tidy.sh).
tidy:
	tests/lint/clang_tidy.sh $(TIDY_BUILD) $(JOBS)

# libFuzzer over every file parser (tokenizer.json, tiktoken ranks, token
# shards, safetensors headers, checkpoint metadata, TOML job configs, Hugging
# Face config.json and model.safetensors.index.json, pipeline schedule CSVs,
# flight recorder dumps, run histories' metrics.jsonl, chat JSONL lines, chat templates, pickles, torch.save
# zip directories, DCP .metadata, PNG and JPEG images), FUZZ_SECONDS each, from
# the seed corpora in tests/fuzz/corpus (copied: libFuzzer adds to its corpus).
FUZZ_SECONDS ?= 12
FUZZ_TARGETS = tokenizer_json tiktoken_ranks shard_header safetensors_header checkpoint_metadata job_config \
	hf_config hf_index pipeline_schedule_csv flight_dump run_history chat_jsonl chat_template pickle zip_directory dcp_metadata \
	flux_config image_decode text_encoder_config
FUZZ_MEMORY = -rss_limit_mb=2048
# Chat templates render under 32 MiB held and 256 MiB allocated (chat_template_fuzz.cpp), so
# no allocation tops 64 MB and the process (with AddressSanitizer's quarantine) stays near
# 500 MB: memory the interpreter fails to bound fails the fuzzer.
FUZZ_MEMORY_chat_template = -rss_limit_mb=1024 -malloc_limit_mb=64
fuzz:
	CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTITAN_FUZZ=ON \
		-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" -DTITAN_CUDA=OFF -DTITAN_TESTS=OFF
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target $(addsuffix _fuzz,$(FUZZ_TARGETS))
	@rm -rf $(FUZZ_BUILD)/corpus $(FUZZ_BUILD)/logs && mkdir -p $(FUZZ_BUILD)/corpus $(FUZZ_BUILD)/logs
	@printf '%s\n' $(FUZZ_TARGETS) | xargs -P $(JOBS) -I{} $(MAKE) --no-print-directory fuzz-one FUZZ_TARGET={}

# One target's run (fuzz runs them $(JOBS) at a time); its log's end is printed if it fails,
# and the input that failed it is kept beside the log (build-fuzz/logs/<target>-crash-...).
fuzz-one:
	@t=$(FUZZ_TARGET); rm -rf $(FUZZ_BUILD)/corpus/$$t; mkdir -p $(FUZZ_BUILD)/corpus $(FUZZ_BUILD)/logs; \
	cp -r tests/fuzz/corpus/$$t $(FUZZ_BUILD)/corpus/$$t; \
	memory="$(FUZZ_MEMORY)"; if [ $$t = chat_template ]; then memory="$(FUZZ_MEMORY_chat_template)"; fi; \
	if $(FUZZ_BUILD)/bin/$${t}_fuzz -max_total_time=$(FUZZ_SECONDS) $$memory -print_final_stats=1 \
		-artifact_prefix=$(FUZZ_BUILD)/logs/$$t- $(FUZZ_BUILD)/corpus/$$t > $(FUZZ_BUILD)/logs/$$t.log 2>&1; then \
		echo "fuzz: $$t for $(FUZZ_SECONDS) s, $$(grep -o 'stat::number_of_executed_units: *[0-9]*' \
			$(FUZZ_BUILD)/logs/$$t.log | grep -o '[0-9]*$$') runs, clean"; \
	else echo "fuzz: $$t FAILED:"; tail -40 $(FUZZ_BUILD)/logs/$$t.log; exit 1; fi

# A .deb of the CPU build: build-package/titan_<version>_amd64.deb, its runtime
# dependencies declared by dpkg-shlibdeps (scripts/dev/deb_install_check.sh
# installs it into a bare Debian root and trains there).
PACKAGE_BUILD ?= build-package
package:
	cmake -S . -B $(PACKAGE_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DTITAN_WERROR=ON -DTITAN_CUDA=OFF \
		-DTITAN_TESTS=OFF -DCMAKE_INSTALL_PREFIX=/usr $(CMAKE_FLAGS)
	cmake --build $(PACKAGE_BUILD) -j $(JOBS)
	cd $(PACKAGE_BUILD) && cpack

# The profiler's cost: this build against one compiled without the profiler
# (build-noprof, -DTITAN_PROFILER=OFF), the same job in the same run.
NOPROF_BUILD ?= build-noprof
bench-profiler: cli
	cmake -S . -B $(NOPROF_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DTITAN_WERROR=ON -DTITAN_CUDA=OFF \
		-DTITAN_TESTS=OFF -DTITAN_PROFILER=OFF $(CMAKE_FLAGS)
	cmake --build $(NOPROF_BUILD) -j $(JOBS) --target titan_cli
	$(BUILD)/bin/titan bench profiler --baseline $(abspath $(NOPROF_BUILD))/bin/titan

# Tracked and not-yet-added sources alike (git's ignore rules apply), so a new
# file is formatted and checked before its first commit, not after it.
SOURCES_TO_FORMAT = git ls-files --cached --others --exclude-standard '*.h' '*.cpp' '*.cu' '*.cuh'

format:
	$(SOURCES_TO_FORMAT) | xargs clang-format -i

format-check:
	@$(SOURCES_TO_FORMAT) | xargs clang-format --dry-run --Werror && echo "format: clean"

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) $(TIDY_BUILD) $(FUZZ_BUILD) $(PACKAGE_BUILD) $(NOPROF_BUILD)
