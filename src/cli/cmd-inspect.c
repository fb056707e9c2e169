/* SPDX-License-Identifier: MIT */
#include <getopt.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "criu-rpc.h"
#include "image-seal.h"
#include "manifest.h"
#include "util.h"
#include "views.h"

static void print_processes(FILE *out, const struct manifest *m)
{
	char size[32], ids[64], pid[16];

	fprintf(out, "processes    %zu\n", m->nprocs);
	fprintf(out, "  %-8s %-8s %-11s %-5s %-10s %s\n", "PID", "PPID", "UID:GID", "CUDA",
		"GPU MEM", "COMMAND");
	for (size_t i = 0; i < m->nprocs; i++) {
		const struct manifest_process *p = &m->procs[i];

		/* 0: a PID namespace's process the preflight did not see. */
		if (p->pid)
			snprintf(pid, sizeof(pid), "%d", (int)p->pid);
		else
			snprintf(pid, sizeof(pid), "-");
		fprintf(out, "  %-8s %-8d %-11s %-5s %-10s %s\n", pid, (int)p->ppid,
			manifest_creds_format(&p->creds, ids, sizeof(ids)), p->cuda ? "yes" : "no",
			p->cuda ? format_bytes(p->gpu_bytes, size, sizeof(size)) : "-",
			p->cmdline && *p->cmdline ? p->cmdline : p->comm);
	}
}

static void print_gpus(FILE *out, const struct manifest *m)
{
	char size[32];

	if (!m->ngpus)
		return;
	fprintf(out, "gpus         %zu\n", m->ngpus);
	for (size_t i = 0; i < m->ngpus; i++) {
		const struct manifest_gpu *g = &m->gpus[i];
		size_t users = 0;

		for (size_t p = 0; p < m->nprocs; p++)
			for (size_t j = 0; j < m->procs[p].ngpus; j++)
				users += m->procs[p].gpus[j] == (int)i;
		fprintf(out, "  %d %s %s (%s, %s), used by %zu process%s\n", g->index, g->uuid,
			g->name, g->chip, format_bytes(g->memory_total, size, sizeof(size)), users,
			users == 1 ? "" : "es");
	}
}

/* What inspect says of the seal: image_read_any's status. */
struct seal_seen {
	const char *status;
	char signer[SEAL_ID_LEN + 1];
};

static void print_seal(FILE *out, const struct seal_seen *s)
{
	fprintf(out, "sealed       ");
	if (!strcmp(s->status, "this host"))
		fprintf(out, "by this host (key %s)\n", s->signer);
	else if (!strcmp(s->status, "another key"))
		fprintf(out, "by key %s, not this host's: restore needs --trust-key\n", s->signer);
	else if (!strcmp(s->status, "unchecked"))
		fprintf(out, "by key %s, unchecked (this host's key cannot be read)\n", s->signer);
	else if (!strcmp(s->status, "none"))
		fprintf(out, "no: restore refuses it\n");
	else
		fprintf(out,
			"broken: the manifest changed after it was sealed, restore refuses it\n");
}

static void print_human(FILE *out, const char *dir, const struct manifest *m,
			const struct seal_seen *seal)
{
	char size[32], criu[32];
	const struct manifest_options *o = &m->options;

	fprintf(out, "image        %s (format %d)\n", dir, m->format_version);
	fprintf(out, "created      %s on %s, kernel %s\n", m->created ? m->created : "?",
		m->hostname ? m->hostname : "?", m->kernel ? m->kernel : "?");
	print_seal(out, seal);
	fprintf(out, "versions     stasis %s, CRIU %s", m->stasis_version ? m->stasis_version : "?",
		criu_version_string(m->criu_version, criu, sizeof(criu)));
	if (m->cuda_driver_version)
		fprintf(out, ", CUDA driver %d.%d", m->cuda_driver_version / 1000,
			m->cuda_driver_version % 1000 / 10);
	if (m->nvidia_driver)
		fprintf(out, ", NVIDIA %s", m->nvidia_driver);
	fprintf(out, "\noptions      %s%s%s%s%s%s%s%s\n", o->leave_running ? "leave-running " : "",
		o->shell_job ? "shell-job " : "", o->tcp_established ? "tcp-established " : "",
		o->ext_unix_sk ? "ext-unix-sk " : "", o->compress ? "compress " : "",
		o->staged ? "staged " : "", o->link_remap ? "link-remap " : "",
		!o->leave_running && !o->shell_job && !o->tcp_established && !o->ext_unix_sk &&
			!o->compress && !o->staged && !o->link_remap
		    ? "none"
		    : "");
	if (m->container.runtime)
		fprintf(out, "container    %s '%s', bundle %s%s\n", m->container.runtime,
			m->container.id, m->container.bundle ? m->container.bundle : "?",
			m->container.spec ? ", OCI spec kept" : "");
	if (m->container.image)
		fprintf(out, "image        %s%s%s, %s snapshot, its changes in rootfs-diff.tar\n",
			m->container.image, m->container.image_digest ? " " : "",
			m->container.image_digest ? m->container.image_digest : "",
			m->container.snapshotter ? m->container.snapshotter : "?");
	print_processes(out, m);
	print_gpus(out, m);
	fprintf(out, "size         %s in %zu files\n",
		format_bytes(m->image_bytes, size, sizeof(size)), m->nfiles);
	fprintf(out, "timings (ms)");
	for (size_t i = 0; i < m->nphases; i++)
		fprintf(out, " %s %.1f%s", m->phases[i].name, (double)m->phases[i].usec / 1000.0,
			i + 1 < m->nphases ? "," : "");
	fprintf(out, "\n");
}

/* checkpointctl's views, as its tree shows them, indented. */
static void print_stats(FILE *out, const struct criu_dump_stats *d)
{
	if (!d->present) {
		fprintf(out, "CRIU dump statistics: none in the image\n");
		return;
	}
	fprintf(out, "CRIU dump statistics\n");
	fprintf(out, "  freezing_time   %u us\n", d->freezing_time);
	fprintf(out, "  frozen_time     %u us\n", d->frozen_time);
	fprintf(out, "  memdump_time    %u us\n", d->memdump_time);
	fprintf(out, "  memwrite_time   %u us\n", d->memwrite_time);
	fprintf(out, "  pages_scanned   %" PRIu64 "\n", d->pages_scanned);
	fprintf(out, "  pages_written   %" PRIu64 "\n", d->pages_written);
}

static void print_sockets(FILE *out, const struct criu_process_view *p, int indent)
{
	char send[32], recv[32];

	if (!p->nsockets)
		return;
	fprintf(out, "%*sopen sockets\n", indent, "");
	for (size_t i = 0; i < p->nsockets; i++) {
		const struct criu_socket_view *s = &p->sockets[i];

		format_bytes(s->send_buf, send, sizeof(send));
		format_bytes(s->recv_buf, recv, sizeof(recv));
		if (!strcmp(s->family, "UNIX"))
			fprintf(out, "%*s[UNIX (%s)] %s\n", indent + 2, "", s->type,
				s->src && *s->src ? s->src : "@");
		else if (s->src)
			fprintf(out, "%*s[%s%s%s%s] %s:%u -> %s:%u (send %s, receive %s)\n",
				indent + 2, "", s->protocol, *s->state ? " (" : "", s->state,
				*s->state ? ")" : "", s->src, s->src_port, s->dst, s->dst_port,
				send, recv);
		else
			fprintf(out, "%*s[%s] (send %s, receive %s)\n", indent + 2, "", s->family,
				send, recv);
	}
}

static void print_process(FILE *out, const struct image_views *v, const struct criu_process_view *p,
			  int depth)
{
	int indent = 2 + 4 * depth;
	size_t n, first;

	fprintf(out, "%*s[%d] %s", indent, "", (int)p->pid, p->comm);
	if (strcmp(p->task_state, "Alive"))
		fprintf(out, " (%s)", p->task_state);
	fprintf(out, "\n");
	if (p->nfiles)
		fprintf(out, "%*sopen files\n", indent + 2, "");
	for (size_t i = 0; i < p->nfiles; i++)
		fprintf(out, "%*s[%s%s%s] %s\n", indent + 4, "", p->files[i].type,
			*p->files[i].type ? " " : "", p->files[i].fd, p->files[i].path);
	print_sockets(out, p, indent + 2);
	first = views_children(v, p->pid, &n);
	for (size_t i = first; depth < 64 && i < first + n; i++) {
		const struct criu_process_view *c = &v->tree.procs[v->by_ppid[i]];

		if (c != p)
			print_process(out, v, c, depth + 1);
	}
}

static void print_views(FILE *out, const struct image_views *v)
{
	const struct criu_process_view *root = views_root(v);

	if (v->shown & VIEW_STATS)
		print_stats(out, &v->stats);
	if (v->shown & (VIEW_PS_TREE | VIEW_FILES | VIEW_SOCKETS)) {
		fprintf(out, "process tree\n");
		if (root)
			print_process(out, v, root, 0);
	}
	if (v->shown & VIEW_MOUNTS) {
		fprintf(out, "mounts%s\n",
			v->nmounts ? "" : ": none of its own (a process tree has the host's)");
		for (size_t i = 0; i < v->nmounts; i++)
			fprintf(out, "  %s  type %s, source %s\n", v->mounts[i].destination,
				v->mounts[i].type, v->mounts[i].source);
	}
}

/* The manifest is input: what it says reaches the terminal as printable
 * ASCII only, so that no escape sequence in a command line or a name
 * plays on the terminal of whoever inspects it. */
static void put_printable(const char *text, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)text[i];

		putchar(c == '\n' || (c >= 0x20 && c < 0x7f) ? c : '?');
	}
}

static int print_human_safely(const char *dir, const struct manifest *m,
			      const struct seal_seen *seal, const struct image_views *v)
{
	_cleanup_free_ char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	if (!f)
		return -1;
	print_human(f, dir, m, seal);
	print_views(f, v);
	fclose(f);
	put_printable(text, len);
	return 0;
}

static int print_json(const struct manifest *m, const struct seal_seen *seal,
		      const struct image_views *v)
{
	_cleanup_free_ char *text = manifest_to_json(m, false);
	json_object *root = text ? json_tokener_parse(text) : NULL, *o = json_object_new_object();

	if (!root || !o) {
		json_object_put(o);
		json_object_put(root);
		return -1;
	}
	json_object_object_add(o, "status", json_object_new_string(seal->status));
	json_object_object_add(o, "key", json_object_new_string(seal->signer));
	json_object_object_add(root, "seal", o);
	views_to_json(v, root);
	printf("%s\n", json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY));
	json_object_put(root);
	return 0;
}

enum {
	OPT_JSON = CLI_OPT_JSON,
	OPT_FORMAT,
	OPT_PS_TREE,
	OPT_FILES,
	OPT_SOCKETS,
	OPT_MOUNTS,
	OPT_STATS,
	OPT_ALL,
};

int cmd_inspect(int argc, char **argv)
{
	static const struct option options[] = {
	    {"json", no_argument, NULL, OPT_JSON},
	    {"format", required_argument, NULL, OPT_FORMAT},
	    {"ps-tree", no_argument, NULL, OPT_PS_TREE},
	    {"files", no_argument, NULL, OPT_FILES},
	    {"sockets", no_argument, NULL, OPT_SOCKETS},
	    {"mounts", no_argument, NULL, OPT_MOUNTS},
	    {"stats", no_argument, NULL, OPT_STATS},
	    {"all", no_argument, NULL, OPT_ALL},
	    {NULL, 0, NULL, 0},
	};
	_cleanup_error_ struct stasis_error *err = NULL;
	struct image_views v;
	struct seal_seen seal;
	unsigned int views = 0;
	struct manifest m;
	bool json = false;
	int c, r;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":", options, NULL)) != -1) {
		switch (c) {
		case OPT_JSON:
			json = true;
			break;
		case OPT_FORMAT:
			if (strcmp(optarg, "json") && strcmp(optarg, "tree"))
				return cli_usage_error(
				    "inspect", "--format wants 'json' or 'tree', not '%s'", optarg);
			json = !strcmp(optarg, "json");
			break;
		case OPT_PS_TREE:
			views |= VIEW_PS_TREE;
			break;
		case OPT_FILES:
			views |= VIEW_FILES;
			break;
		case OPT_SOCKETS:
			views |= VIEW_SOCKETS;
			break;
		case OPT_MOUNTS:
			views |= VIEW_MOUNTS;
			break;
		case OPT_STATS:
			views |= VIEW_STATS;
			break;
		case OPT_ALL:
			views |=
			    VIEW_PS_TREE | VIEW_FILES | VIEW_SOCKETS | VIEW_MOUNTS | VIEW_STATS;
			break;
		default:
			return cli_option_error("inspect", c, argv, ":");
		}
	}
	if (optind < argc - 1)
		return cli_usage_error("inspect", "unexpected argument '%s'", argv[optind + 1]);
	if (optind != argc - 1)
		return cli_usage_error("inspect", "expected one image directory");
	manifest_init(&m);
	r = image_read_any(argv[optind], &m, &seal.status, seal.signer, &err);
	if (r == 0)
		r = views_read(argv[optind], &m, views, &v, &err);
	if (r < 0) {
		manifest_free(&m);
		return cli_fail("inspect", err);
	}
	r = json ? print_json(&m, &seal, &v) : print_human_safely(argv[optind], &m, &seal, &v);
	views_free(&v);
	manifest_free(&m);
	if (r < 0) {
		fprintf(stderr, "stasis inspect: out of memory\n");
		return EXIT_FAILED;
	}
	return EXIT_OK;
}
