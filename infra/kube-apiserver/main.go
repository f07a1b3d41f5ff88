// Command kube-apiserver is the Kubernetes API server of k8s.io/kubernetes, built from the Go module proxy
// for headroom's pod-discovery tests, which run it on loopback without kubelets or controllers.
//
//	kube-apiserver [API server flags]
//	kube-apiserver etcd --data-dir DIR --client-port N --peer-port M
//
// The second form runs the etcd server its tests store the API objects in (go.etcd.io/etcd/server, the
// version k8s.io/kubernetes itself requires), so the tests need no etcd installed on the machine.
package main

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "etcd" {
		if err := runEtcd(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "etcd:", err)
			os.Exit(1)
		}
		return
	}
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}

// runEtcd serves a single-member etcd on 127.0.0.1 until SIGTERM or SIGINT.
func runEtcd(args []string) error {
	flags := flag.NewFlagSet("etcd", flag.ContinueOnError)
	dataDir := flags.String("data-dir", "", "folder of the member's data")
	clientPort := flags.Int("client-port", 2379, "client port on 127.0.0.1")
	peerPort := flags.Int("peer-port", 2380, "peer port on 127.0.0.1")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if *dataDir == "" {
		return fmt.Errorf("--data-dir is required")
	}
	client := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", *clientPort)}
	peer := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", *peerPort)}
	cfg := embed.NewConfig()
	cfg.Dir = *dataDir
	cfg.LogLevel = "error"
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	server, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	defer server.Close()
	select {
	case <-server.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		return fmt.Errorf("not ready within 60 s")
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-stop:
	case err := <-server.Err():
		return err
	}
	return nil
}
