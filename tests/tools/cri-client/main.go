// Command cri-client is a minimal CRI (Kubernetes Container Runtime
// Interface) client for the tests: it drives a container runtime's CRI
// plugin (containerd's) over gRPC the way the kubelet does. Built by
// scripts/build-cri-client.sh from Debian's Go packages.
//
// usage: cri-client [-a UNIX_SOCKET_PATH] [-t SECONDS] COMMAND ARGS...
//
// Results go to stdout; an error is one line on stderr, with exit status 1.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const usage = `usage: cri-client [-a UNIX_SOCKET_PATH] [-t SECONDS] COMMAND ARGS...

  -a PATH     the runtime's CRI socket (default /run/containerd/containerd.sock)
  -t SECONDS  the deadline of every call (default 60)

commands:
  version                                  runtime name and version
  runp POD_CONFIG.json                     run a pod sandbox; prints its ID
  stopp POD_ID                             stop a pod sandbox
  rmp POD_ID                               remove a pod sandbox
  create POD_ID CONTAINER_CONFIG.json POD_CONFIG.json
                                           create a container; prints its ID
  start ID                                 start a container
  stop ID [TIMEOUT_S]                      stop a container (timeout default 0)
  rm ID                                    remove a container
  state ID                                 the container's state name
  inspect ID                               verbose status as JSON, then info
  checkpoint ID LOCATION                   checkpoint a container to LOCATION
  ps                                       containers: ID, state, name
  pods                                     pod sandboxes: ID, state, name
  pull IMAGE                               pull an image; prints its ref
  images                                   images: ID and repo tags
`

// errUsage marks a command line error.
var errUsage = errors.New("bad usage (cri-client -h for help)")

type client struct {
	rt      runtime.RuntimeServiceClient
	img     runtime.ImageServiceClient
	timeout time.Duration
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		msg := strings.Join(strings.Fields(err.Error()), " ")
		fmt.Fprintf(os.Stderr, "cri-client: %s\n", msg)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("cri-client", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	socket := fs.String("a", "/run/containerd/containerd.sock", "")
	seconds := fs.Float64("t", 60, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			_, err = io.WriteString(out, usage)
			return err
		}
		return err
	}
	if *seconds <= 0 {
		return fmt.Errorf("-t %v: the timeout must be positive", *seconds)
	}
	args = fs.Args()
	if len(args) == 0 {
		return errUsage
	}

	conn, err := grpc.NewClient("passthrough:///cri",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", *socket)
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)))
	if err != nil {
		return fmt.Errorf("connect %s: %w", *socket, err)
	}
	defer conn.Close()
	c := &client{
		rt:      runtime.NewRuntimeServiceClient(conn),
		img:     runtime.NewImageServiceClient(conn),
		timeout: time.Duration(*seconds * float64(time.Second)),
	}
	if err := c.command(args[0], args[1:], out); err != nil {
		return fmt.Errorf("%s: %w", args[0], err)
	}
	return nil
}

// nargs checks that a command has between lo and hi arguments.
func nargs(args []string, lo, hi int) error {
	if len(args) < lo || len(args) > hi {
		return errUsage
	}
	return nil
}

// ctx is the deadline of one call, the -t timeout plus extra.
func (c *client) ctx(extra time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), c.timeout+extra)
}

func (c *client) command(name string, args []string, out io.Writer) error {
	ctx, cancel := c.ctx(0)
	defer cancel()
	switch name {
	case "version":
		if err := nargs(args, 0, 0); err != nil {
			return err
		}
		r, err := c.rt.Version(ctx, &runtime.VersionRequest{})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(out, "RuntimeName: %s\nRuntimeVersion: %s\nRuntimeApiVersion: %s\n",
			r.GetRuntimeName(), r.GetRuntimeVersion(), r.GetRuntimeApiVersion())
		return err

	case "runp":
		if err := nargs(args, 1, 1); err != nil {
			return err
		}
		var config runtime.PodSandboxConfig
		if err := readJSON(args[0], &config); err != nil {
			return err
		}
		r, err := c.rt.RunPodSandbox(ctx, &runtime.RunPodSandboxRequest{Config: &config})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(out, r.GetPodSandboxId())
		return err

	case "stopp":
		if err := nargs(args, 1, 1); err != nil {
			return err
		}
		_, err := c.rt.StopPodSandbox(ctx, &runtime.StopPodSandboxRequest{PodSandboxId: args[0]})
		return err

	case "rmp":
		if err := nargs(args, 1, 1); err != nil {
			return err
		}
		_, err := c.rt.RemovePodSandbox(ctx, &runtime.RemovePodSandboxRequest{PodSandboxId: args[0]})
		return err

	case "create":
		if err := nargs(args, 3, 3); err != nil {
			return err
		}
		var config runtime.ContainerConfig
		var pod runtime.PodSandboxConfig
		if err := readJSON(args[1], &config); err != nil {
			return err
		}
		if err := readJSON(args[2], &pod); err != nil {
			return err
		}
		r, err := c.rt.CreateContainer(ctx, &runtime.CreateContainerRequest{
			PodSandboxId:  args[0],
			Config:        &config,
			SandboxConfig: &pod,
		})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(out, r.GetContainerId())
		return err

	case "start":
		if err := nargs(args, 1, 1); err != nil {
			return err
		}
		_, err := c.rt.StartContainer(ctx, &runtime.StartContainerRequest{ContainerId: args[0]})
		return err

	case "stop":
		if err := nargs(args, 1, 2); err != nil {
			return err
		}
		var timeout int64
		if len(args) == 2 {
			t, err := strconv.ParseInt(args[1], 10, 64)
			if err != nil || t < 0 {
				return fmt.Errorf("bad timeout %q", args[1])
			}
			timeout = t
		}
		// The runtime waits up to the timeout for the container to
		// stop: the call's deadline gets that on top.
		sctx, scancel := c.ctx(time.Duration(timeout) * time.Second)
		defer scancel()
		_, err := c.rt.StopContainer(sctx, &runtime.StopContainerRequest{
			ContainerId: args[0],
			Timeout:     timeout,
		})
		return err

	case "rm":
		if err := nargs(args, 1, 1); err != nil {
			return err
		}
		_, err := c.rt.RemoveContainer(ctx, &runtime.RemoveContainerRequest{ContainerId: args[0]})
		return err

	case "state":
		if err := nargs(args, 1, 1); err != nil {
			return err
		}
		r, err := c.rt.ContainerStatus(ctx, &runtime.ContainerStatusRequest{ContainerId: args[0]})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(out, r.GetStatus().GetState().String())
		return err

	case "inspect":
		if err := nargs(args, 1, 1); err != nil {
			return err
		}
		r, err := c.rt.ContainerStatus(ctx, &runtime.ContainerStatusRequest{
			ContainerId: args[0],
			Verbose:     true,
		})
		if err != nil {
			return err
		}
		if err := writeJSON(out, r.GetStatus()); err != nil {
			return err
		}
		info := r.GetInfo()
		keys := make([]string, 0, len(info))
		for k := range info {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if _, err := fmt.Fprintf(out, "%s: %s\n", k, info[k]); err != nil {
				return err
			}
		}
		return nil

	case "checkpoint":
		if err := nargs(args, 2, 2); err != nil {
			return err
		}
		_, err := c.rt.CheckpointContainer(ctx, &runtime.CheckpointContainerRequest{
			ContainerId: args[0],
			Location:    args[1],
			Timeout:     int64(c.timeout / time.Second),
		})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(out, args[1])
		return err

	case "ps":
		if err := nargs(args, 0, 0); err != nil {
			return err
		}
		r, err := c.rt.ListContainers(ctx, &runtime.ListContainersRequest{})
		if err != nil {
			return err
		}
		for _, ct := range r.GetContainers() {
			if _, err := fmt.Fprintf(out, "%s %s %s\n", ct.GetId(), ct.GetState(),
				ct.GetMetadata().GetName()); err != nil {
				return err
			}
		}
		return nil

	case "pods":
		if err := nargs(args, 0, 0); err != nil {
			return err
		}
		r, err := c.rt.ListPodSandbox(ctx, &runtime.ListPodSandboxRequest{})
		if err != nil {
			return err
		}
		for _, p := range r.GetItems() {
			if _, err := fmt.Fprintf(out, "%s %s %s\n", p.GetId(), p.GetState(),
				p.GetMetadata().GetName()); err != nil {
				return err
			}
		}
		return nil

	case "pull":
		if err := nargs(args, 1, 1); err != nil {
			return err
		}
		r, err := c.img.PullImage(ctx, &runtime.PullImageRequest{
			Image: &runtime.ImageSpec{Image: args[0]},
		})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(out, r.GetImageRef())
		return err

	case "images":
		if err := nargs(args, 0, 0); err != nil {
			return err
		}
		r, err := c.img.ListImages(ctx, &runtime.ListImagesRequest{})
		if err != nil {
			return err
		}
		for _, im := range r.GetImages() {
			line := im.GetId()
			if tags := im.GetRepoTags(); len(tags) > 0 {
				line += " " + strings.Join(tags, " ")
			}
			if _, err := fmt.Fprintln(out, line); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("unknown command (cri-client -h for help)")
}

// readJSON reads a message from a JSON file; the field names may be the
// proto ones (log_directory) or their JSON forms (logDirectory).
func readJSON(path string, m proto.Message) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := protojson.Unmarshal(data, m); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// writeJSON writes a message as indented JSON, with the proto field names.
func writeJSON(out io.Writer, m proto.Message) error {
	data, err := protojson.MarshalOptions{Multiline: true, UseProtoNames: true}.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "%s\n", data)
	return err
}
