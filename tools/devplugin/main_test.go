package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	api "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type kubelet struct {
	api.UnimplementedRegistrationServer
	got chan *api.RegisterRequest
}

func (k *kubelet) Register(_ context.Context, r *api.RegisterRequest) (*api.Empty, error) {
	k.got <- r
	return &api.Empty{}, nil
}

// The plugin registers with a kubelet's socket, lists its devices healthy and allocates them
// as NVIDIA_VISIBLE_DEVICES; SIGTERM removes its socket.
func TestRegistersListsAndAllocates(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "devplugin") // a unix socket path is at most 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	lis, err := net.Listen("unix", filepath.Join(dir, "kubelet.sock"))
	if err != nil {
		t.Fatal(err)
	}
	k := &kubelet{got: make(chan *api.RegisterRequest, 1)}
	server := grpc.NewServer()
	api.RegisterRegistrationServer(server, k)
	go func() { _ = server.Serve(lis) }()
	defer server.Stop()

	devices := []*api.Device{{ID: "a", Health: api.Healthy}, {ID: "b", Health: api.Healthy}}
	signals := make(chan os.Signal, 1)
	done := make(chan bool, 1)
	go func() { ok, _ := serve(dir, "p.sock", "nvidia.com/gpu", devices, signals); done <- ok }()
	var req *api.RegisterRequest
	select {
	case req = <-k.got:
	case <-time.After(10 * time.Second):
		t.Fatal("no Register call")
	}
	if req.Version != api.Version || req.Endpoint != "p.sock" || req.ResourceName != "nvidia.com/gpu" {
		t.Fatalf("register request: %v", req)
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "p.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := api.NewDevicePluginClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := client.ListAndWatch(ctx, &api.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	listed, err := stream.Recv()
	if err != nil || len(listed.Devices) != 2 || listed.Devices[1].Health != api.Healthy {
		t.Fatalf("ListAndWatch: %v %v", listed, err)
	}
	got, err := client.Allocate(ctx, &api.AllocateRequest{ContainerRequests: []*api.ContainerAllocateRequest{
		{DevicesIds: []string{"b"}}, {DevicesIds: []string{"a", "b"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"b", "a,b"} {
		if env := got.ContainerResponses[i].Envs[VisibleEnv]; env != want {
			t.Fatalf("container %d: %s=%q, want %q", i, VisibleEnv, env, want)
		}
	}
	signals <- os.Interrupt
	if !<-done {
		t.Fatal("serve did not end on the signal")
	}
}
