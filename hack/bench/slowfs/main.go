// slowfs: a loopback FUSE mount whose renames are slow, for hack/bench.sh's "state writes slowed"
// condition. topolet's state file is written as temporary file, fsync, rename, directory fsync
// (shell::state_file); every rename under MOUNTPOINT waits --delay first, so each state write
// takes at least that long, as on a stalled disk. Everything else passes through to BACKING.
//
// Usage: slowfs --delay 500ms BACKING MOUNTPOINT   (as root; runs until SIGTERM, then unmounts)
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

var delay time.Duration

// slowNode is a loopback node whose Rename waits `delay` before renaming.
type slowNode struct {
	fs.LoopbackNode
}

var _ = (fs.NodeRenamer)((*slowNode)(nil))

func (n *slowNode) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	time.Sleep(delay)
	return n.LoopbackNode.Rename(ctx, name, newParent, newName, flags)
}

func newNode(root *fs.LoopbackRoot, _ *fs.Inode, _ string, _ *syscall.Stat_t) fs.InodeEmbedder {
	return &slowNode{fs.LoopbackNode{RootData: root}}
}

func main() {
	flag.DurationVar(&delay, "delay", 500*time.Millisecond, "wait before each rename")
	flag.Parse()
	if flag.NArg() != 2 {
		fmt.Fprintln(os.Stderr, "usage: slowfs --delay D BACKING MOUNTPOINT")
		os.Exit(2)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(flag.Arg(0), &st); err != nil {
		fmt.Fprintf(os.Stderr, "slowfs: %s: %v\n", flag.Arg(0), err)
		os.Exit(1)
	}
	root := &fs.LoopbackRoot{Path: flag.Arg(0), Dev: uint64(st.Dev), NewNode: newNode}
	rootNode := newNode(root, nil, "", &st)
	root.RootNode = rootNode
	server, err := fs.Mount(flag.Arg(1), rootNode, &fs.Options{
		MountOptions: fuse.MountOptions{DirectMountStrict: true, FsName: "slowfs", Name: "slowfs"},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "slowfs: mount %s: %v\n", flag.Arg(1), err)
		os.Exit(1)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		_ = server.Unmount()
	}()
	fmt.Println("mounted")
	server.Wait()
}
