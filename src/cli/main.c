/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "progress.h"
#include "note.h"
#include "runc-wrap.h"
#include "stasis.h"
#include "util.h"

mode_t cli_caller_umask = 022;

const struct command commands[] = {
    {"checkpoint", cmd_checkpoint, "checkpoint a process tree or container into an image",
     "usage: stasis checkpoint PID -D DIR [options]   (alias: dump)\n"
     "       stasis dump -t PID -D DIR [options]        (as criu dump)\n"
     "       stasis checkpoint --runtime runc|containerd CONTAINER -D DIR [options]\n"
     "\n"
     "Checkpoint the process tree rooted at PID, GPU state included, into DIR.\n"
     "The tree stops unless --leave-running is given.\n"
     "\n"
     "  -D, --images-dir DIR  image directory (new or empty; relative to here)\n"
     "  -t, --tree PID        the tree's root, as criu dump takes it\n"
     "  -R, --leave-running   keep the tree running after the checkpoint; an image\n"
     "                        beyond the page cache's dirty limit, or with a\n"
     "                        process big enough for its pages to be written in\n"
     "                        parts side by side, is dumped into $STASIS_STAGE_DIR\n"
     "                        (default /dev/shm) where memory allows, and written\n"
     "                        to DIR once the tree runs again\n"
     "      --stage           with --leave-running, stage whatever the image's size\n"
     "      --no-stage        with --leave-running, never stage\n"
     "  -j, --shell-job       the tree was started from a shell (shares its session)\n"
     "      --tcp-established checkpoint established TCP connections\n"
     "  -x, --ext-unix-sk     checkpoint unix sockets whose peer is outside the tree\n"
     "  -v[N], --verbosity[=N]  CRIU's log level, 0 (none) to 4 (all, the default)\n"
     "  -o, --log-file NAME   CRIU's log, a name ending in .log, kept in DIR/criu\n"
     "                        (default dump.log)\n"
     "      --timeout MS      CUDA lock timeout, 1 to 3600000 (default 10000)\n"
     "      --runtime runc|containerd  checkpoint container CONTAINER instead of a PID\n"
     "                        (-t, -j, -v, -o and the socket options are a tree's)\n"
     "      --namespace NS    containerd's namespace (default $CONTAINERD_NAMESPACE,\n"
     "                        else 'default')\n"
     "      --address SOCK    containerd's socket (default $CONTAINERD_ADDRESS, else\n"
     "                        /run/containerd/containerd.sock)\n"
     "      --thp             transparent huge pages 'always' while it runs (the\n"
     "                        machine's setting is put back afterwards); where the\n"
     "                        setting is 'madvise', the default for the driver's\n"
     "                        copy of GPU memory\n"
     "      --no-thp          leave the setting alone, also for the driver's copy\n"
     "      --compress        zstd the memory pages on the way to disk; CRIU writes\n"
     "                        through a staging folder in memory ($STASIS_STAGE_DIR,\n"
     "                        default /dev/shm), and restore decompresses there\n"
     "      --export FILE     also write the image as one archive, in the layout of\n"
     "                        podman's and checkpointctl's (checkpoint/, spec.dump,\n"
     "                        config.dump, stats-dump) with stasis's sealed manifest;\n"
     "                        zstd where FILE ends in .zst; -D then optional\n"
     "      --print-stats, --json  print phase timings and CRIU's statistics\n"
     "                        (freezing_time, frozen_time, ...) as JSON on stdout\n"
     "      --progress        show progress on stderr also with --json or off a\n"
     "                        terminal (a line every 5 s there); on a terminal\n"
     "                        without --json it is shown anyway: the GPU copy's\n"
     "                        and the pages' bytes done, of how many, and rate\n"},
    {"restore", cmd_restore, "restore a process tree or container from an image",
     "usage: stasis restore -D DIR [options]\n"
     "       stasis restore --import FILE [options]   (an archive of --export)\n"
     "\n"
     "Restore the tree saved in DIR. stasis stays its parent and exits with the\n"
     "restored root's status, unless --detach is given; Ctrl-C before then stops\n"
     "the restore and kills what it brought back. DIR must be sealed by\n"
     "this host, or by a key given with --trust-key. Nothing is written into DIR:\n"
     "CRIU's log goes to a work folder of the restore's own in /run/stasis\n"
     "($STASIS_RUN_DIR), kept when the restore fails and named in its error.\n"
     "\n"
     "  -D, --images-dir DIR  image directory\n"
     "      --import FILE     the image in an archive 'checkpoint --export' wrote,\n"
     "                        read into a work folder of root's for the restore\n"
     "  -d, --detach          leave the restored tree running; print its PID\n"
     "      --gpu-map MAP     OLD=NEW,... GPUs by UUID or index, each OLD one of\n"
     "                        the image's (stasis inspect), each named once\n"
     "  -j, --shell-job, --tcp-established, -x, --ext-unix-sk\n"
     "                        accepted as criu restore takes them: the image's own\n"
     "                        are used whatever is given; one it was made without\n"
     "                        changes nothing, and a note says so\n"
     "  -v[N], --verbosity[=N]  CRIU's log level, 0 (none) to 4 (all, the default)\n"
     "  -o, --log-file NAME   CRIU's log, a name ending in .log in the work folder\n"
     "                        (default restore.log)\n"
     "      --runtime runc|containerd  the image is a container: its runtime\n"
     "                        restores it (detached)\n"
     "      --bundle PATH     runc: the container's bundle (default: the one checkpointed)\n"
     "      --name NEW        restore as container NEW (default: the same id)\n"
     "      --namespace NS    containerd: restore into namespace NS (default: the\n"
     "                        image's)\n"
     "      --address SOCK    containerd's socket (default $CONTAINERD_ADDRESS, else\n"
     "                        /run/containerd/containerd.sock)\n"
     "      --thp             transparent huge pages 'always' while it runs\n"
     "      --trust-key FILE  accept an image sealed with the key in FILE, not only\n"
     "                        one sealed by this host (up to 8 times)\n"
     "      --print-stats, --json  print phase timings and CRIU's statistics\n"
     "                        (freezing_time, frozen_time, ...) as JSON on stdout\n"
     "      --progress        show progress on stderr also with --json or off a\n"
     "                        terminal (a line every 5 s there); on a terminal\n"
     "                        without --json it is shown anyway: the GPU copy's\n"
     "                        and the pages' bytes done, of how many, and rate\n"},
    {"migrate", cmd_migrate, "move a running process tree or container to another host",
     "usage: stasis migrate PID --to HOST:PORT --key-file FILE [options]\n"
     "       stasis migrate -t PID --to HOST:PORT --key-file FILE [options]\n"
     "       stasis migrate --runtime runc ID --to HOST:PORT --key-file FILE [options]\n"
     "\n"
     "Stream the tree rooted at PID, or the runc container ID, GPU state\n"
     "included, to 'stasis receive' on HOST, which restores it as it arrives.\n"
     "It stays frozen here (a container paused) until it runs there, then goes;\n"
     "on any failure before that it runs on here.\n"
     "Nothing of the image touches the disk on either side.\n"
     "\n"
     "      --runtime runc    ID names a runc container (its bundle must be at\n"
     "                        the same path there)\n"
     "      --to HOST:PORT    where 'stasis receive' listens\n"
     "      --key-file FILE   the shared secret (32 bytes or more, mode 0600)\n"
     "      --compress auto|on|off  zstd on the wire: auto where a sample of\n"
     "                        each frame shrinks by a tenth (default auto)\n"
     "  -t, --tree PID        the tree's root, as criu dump takes it\n"
     "      --timeout MS      CUDA lock timeout, 1 to 3600000 (default 10000)\n"
     "      --json            phases in microseconds, bytes and the pause as JSON\n"},
    {"receive", cmd_receive, "restore trees and containers migrated from another host",
     "usage: stasis receive --listen ADDR:PORT --key-file FILE [options]\n"
     "\n"
     "Accept migrations from 'stasis migrate', one at a time: check that this\n"
     "host can run the tree (CRIU, driver, GPUs, memory, PIDs; a container's\n"
     "name, bundle and runtime) before anything is sent, restore it as it\n"
     "streams in, and print what was restored. The tree needs the same files at\n"
     "the same paths as on the source; a container its bundle.\n"
     "\n"
     "      --listen ADDR:PORT  where to listen\n"
     "      --key-file FILE   the shared secret (32 bytes or more, mode 0600)\n"
     "      --gpu-map auto|OLD=NEW,...  GPU placement (default auto: the same\n"
     "                        GPUs, else free ones of the same chip)\n"
     "      --name NEW        a container's id here (default: its own)\n"
     "      --once            return after one migration, with its status\n"
     "      --json            one JSON line per migration\n"},
    {"inspect", cmd_inspect, "show what an image holds",
     "usage: stasis inspect DIR [--ps-tree] [--files] [--sockets] [--mounts] [--stats]\n"
     "                          [--all] [--format tree|json] [--json]\n"
     "\n"
     "Process tree, options, GPUs, sizes, phase timings and versions of an image,\n"
     "and whether it is sealed by this host (restore refuses it otherwise).\n"
     "The views of checkpointctl's inspect, read from CRIU's own files:\n"
     "\n"
     "      --ps-tree         CRIU's process tree: PID, name, state\n"
     "      --files           each process's open files, cwd and root\n"
     "      --sockets         each process's sockets: protocol, state, addresses\n"
     "      --mounts          a container's mounts (from its OCI spec)\n"
     "      --stats           CRIU's dump statistics (freezing_time, frozen_time,\n"
     "                        memdump_time, memwrite_time, pages_scanned, ...)\n"
     "      --all             every view\n"
     "      --format json, --json  the manifest and the views as JSON, the views\n"
     "                        under checkpointctl's names (statistics,\n"
     "                        process_tree, file_descriptors, sockets, mounts)\n"},
    {"demo", cmd_demo, "checkpoint and restore the built-in sample workload",
     "usage: stasis demo [--gpu|--cpu] [DIR]\n"
     "\n"
     "Start a small workload (a counter ticking through a pipe between two\n"
     "processes, writing to a file), checkpoint it, let it die, restore it and\n"
     "show that it carried on where it stopped. Where a GPU is visible (or with\n"
     "--gpu) the workload also keeps its counter and a 256 MiB checksummed\n"
     "pattern in GPU memory and checks both after the restore. It says first\n"
     "which demo it runs and why. DIR defaults to a new folder under /tmp.\n"},
    {"check", cmd_check, "is this machine ready for GPU checkpoints",
     "usage: stasis check [--json]\n"
     "\n"
     "Driver, CRIU, hardware breakpoints, persistence mode, MIG/MPS, transparent\n"
     "huge pages and root, each ok, warning or error with a remedy. Exits 1 on\n"
     "any error. Without an NVIDIA driver CPU checkpoints work: a warning.\n"},
    {"ps", cmd_ps, "list the CUDA processes and containers of this machine",
     "usage: stasis ps [--json]\n"
     "\n"
     "Every CUDA process: PID, command, GPUs, GPU memory, checkpoint state,\n"
     "container, and what would block its checkpoint. Then every runc and\n"
     "containerd container with its status, init PID and how many of its\n"
     "processes use CUDA. Without an NVIDIA driver: the session leaders (the\n"
     "trees stasis can checkpoint) and the containers, the GPU columns empty.\n"},
    {"gpu", cmd_gpu, "suspend or resume GPU state in place",
     "usage: stasis gpu suspend PID... [--timeout MS] [--json]\n"
     "       stasis gpu resume PID... [--json]\n"
     "\n"
     "suspend: lock and checkpoint each process's GPU state into its host\n"
     "memory, all in parallel; the GPU is freed and the process waits.\n"
     "resume: restore and unlock, onto the GPUs it left. On any failure every\n"
     "process touched goes back to running. --timeout, the lock's, 1 to 3600000\n"
     "ms (default 10000).\n"},
    {"oci", cmd_oci, "add the NVIDIA devices and driver libraries to an OCI config",
     "usage: stasis oci gpu-spec CONFIG.json [--gpus all|UUID,...] [--cdi FILE]\n"
     "\n"
     "Edit an OCI runtime config in place the way a CDI spec's containerEdits\n"
     "would: the device nodes /dev/nvidiactl, /dev/nvidia-uvm*, /dev/nvidiaN of\n"
     "the chosen GPUs (by UUID or index) with their cgroup rules, and read-only\n"
     "bind mounts of the driver libraries ldconfig finds. With --cdi, apply that\n"
     "JSON CDI spec instead (--gpus then names its devices); its hooks are not run.\n"},
    {"run", cmd_run, "start a job ready to be checkpointed (NCCL ranks included)",
     "usage: stasis run [--] COMMAND [ARG...]\n"
     "\n"
     "Run COMMAND in a session of its own (its PID is what stasis checkpoint\n"
     "takes) with the settings that let a multi-GPU job's NCCL ranks be\n"
     "checkpointed and restored, each printed once on stderr with its reason:\n"
     "NCCL_P2P_DISABLE=1 NCCL_NVLS_ENABLE=0 NCCL_CUMEM_HOST_ENABLE=0 USE_LIBUV=0.\n"
     "They cost collective bandwidth (docs/MULTI-GPU.md). With a terminal,\n"
     "stasis stays COMMAND's parent, forwards SIGINT, SIGTERM, SIGHUP and SIGQUIT\n"
     "to it and exits with its status; without one it becomes COMMAND. Either\n"
     "way it prints the job's PID.\n"},
    {"cuda-checkpoint", cmd_cuda_checkpoint, "NVIDIA cuda-checkpoint compatible interface",
     "usage: stasis cuda-checkpoint --help   (or run it as 'cuda-checkpoint')\n"},
    {"help", cmd_help, "show help for a command", "usage: stasis help [COMMAND]\n"},
    {NULL, NULL, NULL, NULL},
};

static const struct command *find_command(const char *name)
{
	if (strcmp(name, "dump") == 0)
		name = "checkpoint";
	for (const struct command *c = commands; c->name; c++)
		if (strcmp(c->name, name) == 0)
			return c;
	return NULL;
}

int cli_fail(const char *command, struct stasis_error *err)
{
	char *line = stasis_error_format(err);

	fprintf(stderr, "stasis %s: error: %s\n", command, line ? line : "unknown error");
	free(line);
	return EXIT_FAILED;
}

int cli_usage_error(const char *command, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "stasis %s: ", command);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " (see 'stasis help %s')\n", command);
	return EXIT_USAGE;
}

bool cli_parse_pid(const char *text, pid_t *pid)
{
	uint64_t v;

	/* The kernel's largest pid_max. */
	if (parse_uint_in(text, 1, 4194304, &v) < 0)
		return false;
	*pid = (pid_t)v;
	return true;
}

bool cli_decorate(bool json)
{
	return !json && isatty(STDERR_FILENO);
}

void cli_progress(bool json, bool asked)
{
	if (isatty(STDERR_FILENO) && (asked || !json))
		progress_set_mode(PROGRESS_TERMINAL);
	else
		progress_set_mode(asked ? PROGRESS_LINES : PROGRESS_OFF);
}

static void print_overview(FILE *out)
{
	fprintf(out, "usage: stasis COMMAND [ARGS]\n\n"
		     "Checkpoint and restore Linux process trees and containers that use NVIDIA "
		     "GPUs.\n\ncommands:\n");
	for (const struct command *c = commands; c->name; c++)
		fprintf(out, "  %-16s %s\n", c->name, c->summary);
	fprintf(out, "\nexit status: 0 success, 1 the operation failed, 2 usage error.\n"
		     "'stasis help COMMAND' tells more; 'stasis --version' the version.\n");
}

int cmd_help(int argc, char **argv)
{
	const struct command *c;

	if (argc < 2) {
		print_overview(stdout);
		return EXIT_OK;
	}
	c = find_command(argv[1]);
	if (!c)
		return cli_usage_error("help", "unknown command '%s'", argv[1]);
	fputs(c->usage, stdout);
	return EXIT_OK;
}

/* What the library did beside the command: one line each on stderr. */
static void print_note(const char *text)
{
	fprintf(stderr, "stasis: %s\n", text);
}

static int print_version(void)
{
	printf("stasis %s\nfeatures: criu-rpc cuda-checkpoint-api nvml gpu-remap "
	       "parallel-gpu rollback\n",
	       STASIS_VERSION);
	return EXIT_OK;
}

int main(int argc, char **argv)
{
	const char *self = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
	const struct command *c;

	/* Run as "cuda-checkpoint" it is NVIDIA's utility, interface and all. */
	if (strcmp(self, "cuda-checkpoint") == 0)
		return cmd_cuda_checkpoint(argc, argv);
	/* Run as containerd's runc for a container it restores. */
	if (strcmp(self, RUNC_WRAP_NAME) == 0)
		return runc_wrap_main(argc, argv);
	if (argc < 2) {
		print_overview(stderr);
		return EXIT_USAGE;
	}
	if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0)
		return print_version();
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)
		return cmd_help(1, argv);
	if (strcmp(argv[1], "__demo-workload") == 0)
		return demo_workload_main(argc - 1, argv + 1);
	if (strcmp(argv[1], "criu-helper") == 0) {
		umask(077);
		return criu_helper_main(argc - 1, argv + 1);
	}
	stasis_set_note_handler(print_note);
	/* What stasis and the CRIU it starts write holds processes' memory:
	 * root's alone whatever the caller's umask (CRIU creates its images
	 * 0666 less the umask). A restored process gets its own umask back
	 * from its image. */
	cli_caller_umask = umask(077);
	c = find_command(argv[1]);
	if (!c) {
		fprintf(stderr, "stasis: unknown command '%s' (see 'stasis help')\n", argv[1]);
		return EXIT_USAGE;
	}
	if (argc > 2 && (strcmp(argv[2], "--help") == 0 || strcmp(argv[2], "-h") == 0) &&
	    strcmp(c->name, "cuda-checkpoint") != 0) {
		fputs(c->usage, stdout);
		return EXIT_OK;
	}
	return c->run(argc - 1, argv + 1);
}
