// Command etcd runs a single-member etcd for the realcluster test tier by embedding
// go.etcd.io/etcd/server/v3/embed at the version k8s.io/kubernetes itself requires. It listens
// on loopback only, in plain HTTP (kube-apiserver is its only client and runs on the same
// machine), without fsync (test data; a crash loses nothing that matters), and exits on
// SIGTERM/SIGINT after closing the server.
//
//	etcd --data-dir DIR --client-port N --peer-port M
package main

import (
	"flag"
	"fmt"
	"log"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	dir := flag.String("data-dir", "", "data directory (required)")
	clientPort := flag.Int("client-port", 2379, "client port on 127.0.0.1")
	peerPort := flag.Int("peer-port", 2380, "peer port on 127.0.0.1")
	logLevel := flag.String("log-level", "warn", "etcd log level")
	flag.Parse()
	if *dir == "" {
		log.Fatal("etcd: --data-dir is required")
	}

	cfg := embed.NewConfig()
	cfg.Name = "realcluster"
	cfg.Dir = *dir
	cfg.LogLevel = *logLevel
	cfg.UnsafeNoFsync = true
	cu, err := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", *clientPort))
	if err != nil {
		log.Fatal(err)
	}
	pu, err := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", *peerPort))
	if err != nil {
		log.Fatal(err)
	}
	cfg.ListenClientUrls = []url.URL{*cu}
	cfg.AdvertiseClientUrls = []url.URL{*cu}
	cfg.ListenPeerUrls = []url.URL{*pu}
	cfg.AdvertisePeerUrls = []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		log.Fatalf("etcd: start: %v", err)
	}
	select {
	case <-e.Server.ReadyNotify():
		log.Printf("etcd: ready on %s", cu)
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		log.Fatal("etcd: not ready within 60s")
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case s := <-sig:
		log.Printf("etcd: %v, stopping", s)
		e.Close()
	case err := <-e.Err():
		log.Fatalf("etcd: %v", err)
	}
}
