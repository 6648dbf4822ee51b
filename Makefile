# space: build, test and run.
#
#   make run     install packages, fetch the guest kernel, build templates, start spaced
#   make test    build with ASan/UBSan and run every test suite (unit, fuzz, e2e, netsec, e2b)
#   make         build the programs into build/
#
# Sources are found by directory, so adding a file never needs a Makefile edit:
# every src/<component>/**.c except main.c is library code that unit tests link against;
# main.c is the program's entry point.

# Build in parallel on every core; test and run recipes stay sequential (they are single
# recipes whose steps run one after the other).
ifeq ($(MAKELEVEL),0)
MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 2)
endif

CC       ?= gcc
CLANG    ?= clang
SAN      ?= 0
PREFIX   ?= /usr/local
DATA_DIR ?= /var/lib/space
LISTEN   ?= 127.0.0.1:7070
# Debian's python3 (with python3-pytest); a python3 earlier on PATH (pyenv) may lack pytest.
PYTHON   ?= /usr/bin/python3
TEMPLATES ?= base
# Templates `make run` builds. code-interpreter-v1 (what the E2B code interpreter SDKs
# create by default) is left out: its first build debootstraps ~320 packages (about a
# quarter of an hour); add it with make run RUN_TEMPLATES="base python code-interpreter-v1".
RUN_TEMPLATES ?= base python
# Templates `make test` builds: the code interpreter's too, so the unmodified
# @e2b/code-interpreter SDK runs against it (tests/e2b/code_interpreter.mjs).
TEST_TEMPLATES ?= base python code-interpreter-v1
# Warm VMs kept per template shape by `make run` (restored and paused; create = claim).
POOL     ?= 2

WARN    := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter -Wformat=2 -Wvla
CSTD    := -std=gnu11 -D_GNU_SOURCE
INC     := -Isrc -Isrc/common
ifeq ($(SAN),1)
  B      := build/san
  OPT    := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
  LDSAN  := -fsanitize=address,undefined
else
  B      := build
  OPT    := -O2 -g -fstack-protector-strong -D_FORTIFY_SOURCE=2
  LDSAN  :=
endif
CFLAGS  := $(CSTD) $(WARN) $(OPT) $(INC) -MMD -MP
LIBS_DAEMON  := -levent -levent_openssl -levent_pthreads -ljansson -lsqlite3 -lpq -lssl -lcrypto -lpthread -lm -lz
LIBS_GATEWAY := -levent -levent_openssl -ljansson -lssl -lcrypto -lm
LIBS_CLI     := -ljansson -lm

srcs = $(shell find $(1) -name '*.c' 2>/dev/null | sort)
objs = $(patsubst src/%.c,$(B)/obj/%.o,$(1))
lib  = $(filter-out %/main.c,$(call srcs,$(1)))

COMMON_SRC  := $(call srcs,src/common)
AGENT_LIB   := $(call lib,src/agent)
DAEMON_LIB  := $(call lib,src/daemon)
GATEWAY_LIB := $(call lib,src/gateway)
CLI_LIB     := $(call lib,src/cli)
VOLFS_LIB   := $(call lib,src/volfs)

# space-qemu-shim.so sits next to spaced, which preloads it into clones' QEMU
# (src/qemushim/qemushim.c).
QEMU_SHIM := $(B)/space-qemu-shim.so
PROGRAMS := $(B)/spaced $(B)/space-gateway $(B)/space $(B)/space-volfs $(QEMU_SHIM)
AGENT    := build/guest/space-agent

.PHONY: all programs agent guest run test unit unit-pg fuzz e2e netsec e2b bench install clean deps kernel templates console
all: programs agent

programs: $(PROGRAMS)
agent: $(AGENT)

$(B)/obj/%.o: src/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(B)/spaced: $(call objs,src/daemon/main.c $(DAEMON_LIB) $(COMMON_SRC))
	$(CC) $(LDSAN) -o $@ $^ $(LIBS_DAEMON)

$(B)/space-gateway: $(call objs,src/gateway/main.c $(GATEWAY_LIB) $(COMMON_SRC))
	$(CC) $(LDSAN) -o $@ $^ $(LIBS_GATEWAY)

$(B)/space: $(call objs,src/cli/main.c $(CLI_LIB) $(COMMON_SRC))
	$(CC) $(LDSAN) -o $@ $^ $(LIBS_CLI)

# The volume server (src/volfs/volfs.h): libc only (common/writeall is too).
$(B)/space-volfs: $(call objs,src/volfs/main.c $(VOLFS_LIB) src/common/writeall.c)
	$(CC) $(LDSAN) -o $@ $^

# Loaded into Debian's QEMU: no sanitizer runtime, no _FORTIFY_SOURCE (its inline open
# wrappers would collide with the functions the shim defines).
$(QEMU_SHIM): src/qemushim/qemushim.c
	$(CC) $(CSTD) $(WARN) -O2 -g -fPIC -shared -U_FORTIFY_SOURCE -o $@ $<

# The guest agent is PID 1 inside the VM: always static, never sanitized (no ASan
# runtime exists in the guest), built in its own object tree.
AGENT_CFLAGS := $(CSTD) $(WARN) -O2 -g -fstack-protector-strong $(INC) -MMD -MP
build/guest/obj/%.o: src/%.c
	@mkdir -p $(dir $@)
	$(CC) $(AGENT_CFLAGS) -c $< -o $@
$(AGENT): $(patsubst src/%.c,build/guest/obj/%.o,src/agent/main.c $(AGENT_LIB) $(COMMON_SRC))
	$(CC) -static -o $@ $^ -ljansson -lutil -lpthread

# ---- library archives: tests link against these so a test pulls in only the modules it
# uses (a half-finished module elsewhere cannot break an unrelated test's link).
$(B)/lib/libcommon.a:  $(call objs,$(COMMON_SRC))
$(B)/lib/libagent.a:   $(call objs,$(AGENT_LIB))
$(B)/lib/libdaemon.a:  $(call objs,$(DAEMON_LIB))
$(B)/lib/libgateway.a: $(call objs,$(GATEWAY_LIB))
$(B)/lib/libcli.a:     $(call objs,$(CLI_LIB))
$(B)/lib/libvolfs.a:   $(call objs,$(VOLFS_LIB))
$(B)/lib/%.a:
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
ARCHIVES := $(addprefix $(B)/lib/,libdaemon.a libgateway.a libagent.a libcli.a libvolfs.a libcommon.a)

# ---- unit tests (cmocka), each tests/unit/test_X.c is one binary
UNIT_SRC  := $(wildcard tests/unit/test_*.c)
UNIT_BINS := $(patsubst tests/unit/%.c,$(B)/tests/%,$(UNIT_SRC))
$(B)/tests/%: tests/unit/%.c $(ARCHIVES)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests/unit $(LDSAN) -o $@ $< -Wl,--start-group $(ARCHIVES) -Wl,--end-group -lcmocka $(LIBS_DAEMON) -lutil

# ---- fuzz targets (libFuzzer), each tests/fuzz/fuzz_X.c links with all library code
FUZZ_SRC  := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BINS := $(patsubst tests/fuzz/%.c,build/fuzz/%,$(FUZZ_SRC))
FUZZ_CFLAGS := $(CSTD) $(WARN) -O1 -g $(INC) -fsanitize=fuzzer-no-link,address,undefined -MMD -MP
FUZZ_LIBOBJS := $(patsubst src/%.c,build/fuzz/obj/%.o,$(COMMON_SRC) $(AGENT_LIB) $(DAEMON_LIB) $(GATEWAY_LIB) $(VOLFS_LIB))
build/fuzz/obj/%.o: src/%.c
	@mkdir -p $(dir $@)
	$(CLANG) $(FUZZ_CFLAGS) -c $< -o $@
build/fuzz/libfuzzlib.a: $(FUZZ_LIBOBJS)
	rm -f $@ && ar rcs $@ $^
build/fuzz/%: tests/fuzz/%.c build/fuzz/libfuzzlib.a
	@mkdir -p $(dir $@)
	$(CLANG) $(CSTD) $(WARN) -O1 -g $(INC) -fsanitize=fuzzer,address,undefined -o $@ $^ $(LIBS_DAEMON) -lutil
FUZZ_SECONDS ?= 15

# The VM tests start jailed clones, which need the shim beside the test binaries' build.
unit: $(UNIT_BINS) $(QEMU_SHIM)
	@fail=""; for t in $(UNIT_BINS); do echo "== $$t"; $$t || fail="$$fail $$(basename $$t)"; done; \
	  if [ -n "$$fail" ]; then echo "unit: FAILED:$$fail"; exit 1; fi

fuzz: $(FUZZ_BINS)
	scripts/run-fuzz.sh $(FUZZ_SECONDS) $(FUZZ_BINS)

# ---- guest side: kernel, initramfs, templates (scripts in guest/)
kernel:
	guest/fetch-kernel.sh build/guest

guest: agent kernel
	guest/build-initramfs.sh build/guest $(AGENT)

templates: guest
	@set -e; for t in $(TEMPLATES); do guest/build-template.sh build/guest $$t; done

deps:
	scripts/install-deps.sh

# The web console (docs/console.md): console/ plus the vendored xterm.js (npm, pinned in
# console/package.json) into build/console, where build/spaced and build/san/spaced find it.
console: build/console/index.html
build/console/index.html: $(wildcard console/*) scripts/build-console.sh
	scripts/build-console.sh build/console

# Installs the release programs into $(DESTDIR)$(PREFIX)/bin (spaced finds space-gateway
# and the QEMU shim beside itself) and the built guest files (kernel, initramfs,
# templates) into $(DESTDIR)$(PREFIX)/share/space/guest, where an installed spaced looks
# by default, and the web console into $(DESTDIR)$(PREFIX)/share/space/console. Guest files go through deploy/image/sync-guest.sh: a changed file is renamed
# into place, never overwritten, so a running sandbox's pinned image keeps its inode.
# Builds the programs if needed, never the guest (`make guest templates` first).
GUEST_DEST = $(DESTDIR)$(PREFIX)/share/space/guest
CONSOLE_DEST = $(DESTDIR)$(PREFIX)/share/space/console
install: programs console
	@test -f build/guest/vmlinux -a -f build/guest/initramfs.cpio -a -d build/guest/templates || \
	  { echo "make install: no guest files in build/guest: run make guest templates first" >&2; exit 1; }
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 build/spaced build/space-gateway build/space $(DESTDIR)$(PREFIX)/bin/
	install -m 0644 build/space-qemu-shim.so $(DESTDIR)$(PREFIX)/bin/
	deploy/image/sync-guest.sh build/guest $(GUEST_DEST)
	rm -rf $(CONSOLE_DEST) && install -d $(CONSOLE_DEST)/vendor
	install -m 0644 build/console/*.* $(CONSOLE_DEST)/
	install -m 0644 build/console/vendor/* $(CONSOLE_DEST)/vendor/

# ---- end-to-end tests: real spaced, real VMs, real namespaces, the real E2B SDK (pytest)
PYTEST_ENV = SPACE_BUILD=$(abspath build/san) SPACE_GUEST=$(abspath build/guest)
E2E_SUITES ?= tests/e2e tests/netsec tests/e2b deploy

e2e: templates console
	$(MAKE) SAN=1 programs
	tests/e2b/install.sh
	$(PYTEST_ENV) $(PYTHON) -m pytest -q -rs $(E2E_SUITES)

# unit tests with a throwaway PostgreSQL server (unix socket only), so the PostgreSQL
# store runs the same checks as the SQLite one instead of skipping.
unit-pg:
	@d=/tmp/space-pg-$$$$; url=$$(scripts/pg-test-server.sh start $$d) || exit 1; \
	  SPACE_TEST_PG="$$url" $(MAKE) SAN=1 unit; rc=$$?; \
	  scripts/pg-test-server.sh stop $$d; exit $$rc

# The release build first (it is what `make run` uses, and -O2 sees warnings -O1 does
# not); templates before unit tests, since test_vm_boot boots the real guest and skips,
# saying so, only when its files are missing.
test: deps
	$(MAKE) programs agent
	$(MAKE) TEMPLATES="$(TEST_TEMPLATES)" templates
	$(MAKE) unit-pg
	$(MAKE) fuzz
	$(PYTHON) deploy/check-manifests.py
	$(PYTHON) scripts/check-includes.py
	$(PYTHON) scripts/check-statics.py
	$(MAKE) TEMPLATES="$(TEST_TEMPLATES)" e2e

run: deps
	$(MAKE) TEMPLATES="$(RUN_TEMPLATES)" templates programs console
	./build/spaced --listen $(LISTEN) --data-dir $(DATA_DIR) --guest-dir $(abspath build/guest) --pool $(POOL)

# Benchmarks (not tests): bench/X.c builds into $(B)/X; bench/*.py drive them and print
# ratios measured side by side, every figure labelled with its accelerator.
$(B)/bench_%: bench/bench_%.c $(ARCHIVES)
	$(CC) $(CFLAGS) -o $@ $< -Wl,--start-group $(ARCHIVES) -Wl,--end-group $(LIBS_DAEMON) -lutil

bench: templates programs $(patsubst bench/%.c,$(B)/%,$(wildcard bench/*.c))
	@for b in bench/*.py; do $(PYTHON) $$b; done

clean:
	rm -rf build

-include $(shell find build -name '*.d' -type f -not -path 'build/guest/cache/*' 2>/dev/null)
