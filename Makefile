# stasis: checkpoint and restore of Linux workloads that use NVIDIA GPUs.
#
#   make          build (installs missing Debian packages, builds CRIU once)
#   make check    build and run every test this machine can run
#   make demo     build and run the built-in demo
#   make gpu-bundle  one folder with everything a GPU machine needs
#   make install  stasis, its CRIU and plugin under PREFIX (/usr/local), the
#                 plugin linked into CRIU's plugin folder (CRIU_PLUGINDIR,
#                 /usr/lib/criu) so that runtimes' criu loads it; DESTDIR too

BUILD    ?= build
CC       ?= gcc
CUDA_INC ?= $(firstword $(wildcard /usr/local/cuda/include /usr/local/cuda-*/include))
CRIU     := $(BUILD)/criu
WERROR   ?= -Werror

CFLAGS   ?= -O2 -g
CFLAGS   += -std=gnu11 -Wall -Wextra $(WERROR) -Wno-unused-parameter -Wno-format-truncation -pthread
LIB_DIRS := src/lib $(patsubst %/,%,$(sort $(dir $(wildcard src/lib/*/*.h))))
CPPFLAGS += -D_GNU_SOURCE $(addprefix -I,$(LIB_DIRS)) -I$(CRIU)/include -I$(CRIU)/include/criu -isystem $(CUDA_INC) \
	    -isystem $(CRIU)/images $(shell pkg-config --cflags fuse3 mount)
LDLIBS   += $(CRIU)/lib/libcriu.a -lprotobuf-c -ljson-c -lxxhash -lzstd $(shell pkg-config --libs gnutls fuse3 libarchive mount libmnl) -ldl -pthread

LIB_SRC  := $(wildcard src/lib/*.c src/lib/*/*.c)
CLI_SRC  := $(wildcard src/cli/*.c)
LIB_OBJ  := $(LIB_SRC:src/%.c=$(BUILD)/obj/%.o)
# CRIU's image formats, in the protobuf-c code CRIU's build generated
# (scripts/build-criu.sh installs it): those criu-images.c and criu-tree.c
# read and those they import.
CRIU_PB  := stats pstree core fs fdinfo bpfmap-file core-aarch64 core-arm core-loongarch64 \
	    core-mips core-ppc64 core-riscv64 core-s390 core-x86 creds eventfd eventpoll ext-file \
	    fh fifo fown fsnotify memfd ns opts packet-sock pidfd pipe regfile rlimit rseq sa \
	    siginfo signalfd sk-inet sk-netlink sk-opts sk-unix tcp-stream timer timerfd tty tun \
	    google/protobuf/descriptor
CRIU_PB_OBJ := $(CRIU_PB:%=$(BUILD)/obj/criu-images/%.pb-c.o)
LIB_OBJ  += $(CRIU_PB_OBJ)
CLI_OBJ  := $(CLI_SRC:src/%.c=$(BUILD)/obj/%.o)
STASIS   := $(BUILD)/bin/stasis
DEPS_OK  := $(BUILD)/.deps-ok

# Sanitized build of the library for the unit tests.
SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
SAN_OBJ   := $(LIB_SRC:src/%.c=$(BUILD)/san/%.o)
UNIT_SRC  := $(wildcard tests/unit/test-*.c)
UNIT_BIN  := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)

FAKE_CUDA := $(BUILD)/fake/libcuda.so.1
FAKE_NCCL := $(BUILD)/fake/libnccl.so.2
WORKLOADS := $(BUILD)/bin/fake-cuda-worker $(BUILD)/bin/hostile-peer $(BUILD)/bin/fake-nccl-rank
# stasis's CRIU plugin, found by stasis at ../lib/stasis/criu from its binary.
PLUGIN    := $(BUILD)/lib/stasis/criu/stasis_nvidia.so
# The NCCL interposer `stasis run` preloads, found at ../lib/stasis from its binary.
NCCL_SHIM := $(BUILD)/lib/stasis/libstasis-nccl.so

.PHONY: all deps criu check unit e2e zdtm demo clean format format-check gpu-bundle bench bench-cpu install uninstall
all: $(STASIS) $(BUILD)/bin/cuda-checkpoint $(PLUGIN) $(NCCL_SHIM)

$(DEPS_OK): scripts/deps.sh
	@./scripts/deps.sh
	@mkdir -p $(BUILD) && touch $@

deps: $(DEPS_OK)

# CRIU is built once; its own script skips the work when it is there. The
# patches' folder is there too: a patch removed changes its time alone.
$(CRIU)/lib/libcriu.a: scripts/build-criu.sh scripts/fetch-criu.sh scripts/apt-private.sh scripts/criu-patches $(wildcard scripts/criu-patches/*.patch) | $(DEPS_OK)
	@./scripts/build-criu.sh $(BUILD)/downloads $(BUILD)/criu-build $(CRIU)
	@touch $@

criu: $(CRIU)/lib/libcriu.a

$(BUILD)/obj/%.o: src/%.c $(CRIU)/lib/libcriu.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c -o $@ $<

# Made by CRIU's build, with libcriu.
$(CRIU)/images/%.pb-c.c: $(CRIU)/lib/libcriu.a ;

$(BUILD)/obj/criu-images/%.pb-c.o: $(CRIU)/images/%.pb-c.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<

$(BUILD)/san/%.o: src/%.c $(CRIU)/lib/libcriu.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(SAN_FLAGS) -MMD -MP -c -o $@ $<

$(STASIS): $(LIB_OBJ) $(CLI_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

PLUGIN_SRC := $(wildcard src/criu-plugin/*.c)

# Loaded into a job's processes: no library of stasis's, nothing but libc.
NCCL_SHIM_SRC := $(wildcard src/nccl-shim/*.c)
$(NCCL_SHIM): $(NCCL_SHIM_SRC) src/nccl-shim/shim.h src/nccl-shim/shim-comms.h src/lib/gpu/nccl-shim-wire.h
	@mkdir -p $(dir $@)
	$(CC) -D_GNU_SOURCE -Isrc/lib/gpu $(CFLAGS) -fvisibility=hidden -shared -fPIC -o $@ \
		$(NCCL_SHIM_SRC) -ldl -pthread

$(PLUGIN): $(PLUGIN_SRC) src/criu-plugin/plugin.h src/lib/gpu/plugin-wire.h $(CRIU)/lib/libcriu.a
	@mkdir -p $(dir $@)
	rm -f $(dir $@)stasis_nvidia_files.so
	$(CC) $(CPPFLAGS) $(CFLAGS) -shared -fPIC -o $@ $(PLUGIN_SRC)

$(BUILD)/bin/cuda-checkpoint: $(STASIS)
	ln -sf stasis $@

$(BUILD)/tests/test-%: tests/unit/test-%.c $(SAN_OBJ) $(CRIU_PB_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(SAN_FLAGS) -o $@ $^ $(LDLIBS) -lcmocka

# The fake driver for CI: same dlopen path, a state machine, fault switches.
$(FAKE_CUDA): tests/fake-cuda/fake-cuda.c tests/fake-cuda/fake-state.h
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -shared -fPIC -o $@ $<

$(BUILD)/bin/fake-cuda-worker: tests/fake-cuda/fake-cuda-worker.c tests/fake-cuda/fake-state.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $<

# NCCL ranks for the fake driver: a fake libnccl and a job of ranks on it.
$(FAKE_NCCL): tests/fake-nccl/fake-nccl.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fvisibility=hidden -shared -fPIC -Wl,-soname,libnccl.so.2 -o $@ $<

$(BUILD)/fake/libfake-nccl-job.so: tests/fake-nccl/fake-nccl-job.c tests/fake-cuda/fake-state.h $(FAKE_NCCL)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fvisibility=hidden -shared -fPIC -o $@ $< $(FAKE_NCCL) \
		-Wl,-rpath,$(abspath $(dir $(FAKE_NCCL)))

$(BUILD)/bin/fake-nccl-rank: tests/fake-nccl/fake-nccl-rank.c $(BUILD)/fake/libfake-nccl-job.so
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< -ldl

# A peer that breaks the migration protocol on purpose, for the e2e tests.
$(BUILD)/bin/hostile-peer: tests/hostile/hostile-peer.c $(LIB_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $^ $(LDLIBS)

# containerd 2.1, beside bookworm's 1.6, and checkpointctl, for the e2e tests.
SID_TOOLS := $(BUILD)/sid/bin/checkpointctl
$(SID_TOOLS): scripts/fetch-sid-tools.sh scripts/apt-private.sh | $(DEPS_OK)
	@./scripts/fetch-sid-tools.sh $(BUILD)/downloads $(BUILD)/sid

# A root of Debian unstable with podman 5.8, for podman's own commands.
SID_ROOT := $(BUILD)/sid-root/.stasis-root
$(SID_ROOT): scripts/sid-root.sh scripts/apt-private.sh | $(DEPS_OK)
	@./scripts/sid-root.sh $(BUILD)/downloads $(BUILD)/sid-root

# The CRI tests' client (the kubelet's calls; built from Debian's Go
# packages: no Debian suite has crictl) and their pods' sandbox process.
CRI_TOOLS := $(BUILD)/bin/cri-client $(BUILD)/bin/cri-pause
$(BUILD)/bin/cri-client: tests/tools/cri-client/main.go scripts/build-cri-client.sh scripts/apt-private.sh | $(DEPS_OK)
	@./scripts/build-cri-client.sh $(BUILD)/downloads $@

$(BUILD)/bin/cri-pause: tests/tools/pause.c
	@mkdir -p $(dir $@)
	$(CC) -O2 -Wall -Wextra -Werror -static -o $@ $<

unit: $(UNIT_BIN) $(FAKE_CUDA)
	@./tests/unit/run $(UNIT_BIN)

e2e: all $(FAKE_CUDA) $(WORKLOADS) $(SID_TOOLS) $(CRI_TOOLS) $(SID_ROOT)
	@./tests/e2e/run $(BUILD)

# CRIU's own tests (zdtm) with upstream's CRIU and with stasis's patched one:
# tests/zdtm/list; the script runs them again only when something changed.
zdtm: $(CRIU)/lib/libcriu.a | $(DEPS_OK)
	@./scripts/zdtm.sh $(BUILD)

check: all $(SID_TOOLS)
	@$(MAKE) --no-print-directory format-check
	@./tests/run-all $(BUILD)
	@$(MAKE) --no-print-directory zdtm

demo: all
	$(STASIS) demo

FORMATTED = $(wildcard src/*/*.[ch] src/lib/*/*.[ch] tests/*/*.[ch])

format:
	clang-format -i $(FORMATTED)

format-check: | $(DEPS_OK)
	@clang-format --dry-run --Werror $(FORMATTED) && echo "format: ok"

gpu-bundle: all
	@./scripts/gpu-bundle.sh $(BUILD)

# The GPU benchmark runs on the device from the bundle (bench/README.md);
# here it builds the bundle and runs it when a GPU is present.
bench: gpu-bundle
	@if nvidia-smi -L >/dev/null 2>&1; then bash .gpu/bench/run; \
	else echo "bench: no GPU here; run 'bash .gpu/bench/run' on the device (bench/README.md)"; fi

bench-cpu: all
	@./bench/bench-cpu $(BUILD)

# stasis's CRIU becomes the machine's criu (PREFIX/sbin, ahead of /usr/sbin
# in root's PATH), and CRIU loads stasis's plugin from its own plugin folder
# wherever it is started from: a runtime's checkpoint and restore get the
# GPU steps (the plugin starts PREFIX/bin/stasis criu-helper).
PREFIX        ?= /usr/local
CRIU_PLUGINDIR ?= /usr/lib/criu

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/sbin \
		$(DESTDIR)$(PREFIX)/lib/stasis/criu $(DESTDIR)$(CRIU_PLUGINDIR)
	install -m 755 $(STASIS) $(DESTDIR)$(PREFIX)/bin/stasis
	install -m 755 $(CRIU)/sbin/criu $(DESTDIR)$(PREFIX)/sbin/criu
	install -m 644 $(PLUGIN) $(DESTDIR)$(PREFIX)/lib/stasis/criu/
	install -m 644 $(NCCL_SHIM) $(DESTDIR)$(PREFIX)/lib/stasis/
	ln -sfn $(PREFIX)/lib/stasis/criu/$(notdir $(PLUGIN)) $(DESTDIR)$(CRIU_PLUGINDIR)/$(notdir $(PLUGIN))

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/stasis $(DESTDIR)$(PREFIX)/sbin/criu \
		$(DESTDIR)$(PREFIX)/lib/stasis/criu/$(notdir $(PLUGIN)) \
		$(DESTDIR)$(PREFIX)/lib/stasis/$(notdir $(NCCL_SHIM)) \
		$(DESTDIR)$(CRIU_PLUGINDIR)/$(notdir $(PLUGIN))
	-rmdir $(DESTDIR)$(PREFIX)/lib/stasis/criu $(DESTDIR)$(PREFIX)/lib/stasis

clean:
	rm -rf $(BUILD)/obj $(BUILD)/san $(BUILD)/bin $(BUILD)/lib $(BUILD)/tests $(BUILD)/fake

.SECONDARY:

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(SAN_OBJ:.o=.d)
