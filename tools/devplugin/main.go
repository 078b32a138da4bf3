// Command devplugin is the real node's stand-in GPU device plugin (docs/e2e.md, "Stand-in: a
// device plugin"): it advertises -count healthy devices of -resource to the kubelet through the
// device-plugin API (v1beta1) and answers Allocate with NVIDIA_VISIBLE_DEVICES=<ids>, as
// NVIDIA's plugin does for its container runtime. No device node, mount or driver is involved:
// it proves the kubelet's allocation and the scheduler's and quota's counting, not a GPU.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	api "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// VisibleEnv is what NVIDIA's container runtime reads to expose devices; here it only tells the
// test which devices the kubelet allocated to the container.
const VisibleEnv = "NVIDIA_VISIBLE_DEVICES"

type plugin struct {
	api.UnimplementedDevicePluginServer
	devices []*api.Device
	stop    chan struct{}
}

func (p *plugin) GetDevicePluginOptions(context.Context, *api.Empty) (*api.DevicePluginOptions, error) {
	return &api.DevicePluginOptions{}, nil
}

// ListAndWatch sends the devices once; they never change (the stream stays open until the
// kubelet or this process ends it).
func (p *plugin) ListAndWatch(_ *api.Empty, stream grpc.ServerStreamingServer[api.ListAndWatchResponse]) error {
	if err := stream.Send(&api.ListAndWatchResponse{Devices: p.devices}); err != nil {
		return err
	}
	select {
	case <-stream.Context().Done():
	case <-p.stop:
	}
	return nil
}

func (p *plugin) Allocate(_ context.Context, req *api.AllocateRequest) (*api.AllocateResponse, error) {
	out := &api.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		log.Printf("allocate %s", strings.Join(c.DevicesIds, ","))
		out.ContainerResponses = append(out.ContainerResponses, &api.ContainerAllocateResponse{
			Envs: map[string]string{VisibleEnv: strings.Join(c.DevicesIds, ",")},
		})
	}
	return out, nil
}

func (p *plugin) PreStartContainer(context.Context, *api.PreStartContainerRequest) (*api.PreStartContainerResponse, error) {
	return &api.PreStartContainerResponse{}, nil
}

func register(kubelet, endpoint, resource string) error {
	conn, err := grpc.NewClient("unix://"+kubelet, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = api.NewRegistrationClient(conn).Register(ctx, &api.RegisterRequest{
		Version: api.Version, Endpoint: endpoint, ResourceName: resource,
		Options: &api.DevicePluginOptions{},
	})
	return err
}

// serve listens on the plugin's socket and registers it; it returns when the socket is gone (a
// restarted kubelet removes every plugin socket: serve again then) or on a signal.
func serve(dir, endpoint, resource string, devices []*api.Device, signals chan os.Signal) (bool, error) {
	sock := filepath.Join(dir, endpoint)
	_ = os.Remove(sock)
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return false, err
	}
	p := &plugin{devices: devices, stop: make(chan struct{})}
	server := grpc.NewServer()
	api.RegisterDevicePluginServer(server, p)
	go func() { _ = server.Serve(lis) }()
	defer func() { close(p.stop); server.Stop() }()
	if err := register(filepath.Join(dir, "kubelet.sock"), endpoint, resource); err != nil {
		return false, fmt.Errorf("register with the kubelet: %w", err)
	}
	log.Printf("registered %s: %d devices on %s", resource, len(devices), sock)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-signals:
			return true, nil
		case <-tick.C:
			if _, err := os.Stat(sock); err != nil {
				log.Printf("%s removed (kubelet restarted): registering again", sock)
				return false, nil
			}
		}
	}
}

func main() {
	dir := flag.String("dir", api.DevicePluginPath, "the kubelet's device-plugin directory (kubelet.sock)")
	resource := flag.String("resource", "nvidia.com/gpu", "extended resource name to advertise")
	count := flag.Int("count", 2, "healthy devices to advertise")
	endpoint := flag.String("endpoint", "tfd-stand-in-gpu.sock", "this plugin's socket in -dir")
	flag.Parse()
	devices := make([]*api.Device, *count)
	for i := range devices {
		devices[i] = &api.Device{ID: fmt.Sprintf("stand-in-gpu-%d", i), Health: api.Healthy}
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	for {
		done, err := serve(*dir, *endpoint, *resource, devices, signals)
		if done {
			_ = os.Remove(filepath.Join(*dir, *endpoint))
			return
		}
		if err != nil {
			log.Printf("%v; trying again in 1 s", err)
		}
		select {
		case <-signals:
			return
		case <-time.After(time.Second):
		}
	}
}
