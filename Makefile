# Thin wrapper over CMake for the README's two commands:
#   make demo   build, then run `stridepack demo` (GPU when usable, else CPU)
#   make test   build, then run every test with ctest
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
# nvcc may live outside PATH in the usual CUDA prefix.
NVCC ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
override CMAKE_FLAGS += $(if $(NVCC),-DCMAKE_CUDA_COMPILER=$(NVCC))

.PHONY: all deps build demo test clean

all: build

deps:
	@sh tools/deps.sh

build: deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	$(BUILD)/tools/stridepack demo

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

clean:
	rm -rf $(BUILD)
