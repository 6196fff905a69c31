// crio-import copies an OCI image archive (the project's test image tarballs) into a CRI-O
// stack's containers-storage under a given name: CRI-O has no image import, and the test host
// has no registry. It is built by hack/install-crio.sh against the containers/image and
// containers/storage versions CRI-O itself requires (this module requires github.com/cri-o/cri-o),
// and run by hack/crio.sh before crio starts, with crio's storage driver, root and run root.
//
// Unlike CRI-O's test/copyimg (the model for this program: cri-o/cri-o test/copyimg/copyimg.go),
// every path it writes is given on its command line: the blob-info cache and the temporary
// directory for the extracted archive (containers/image's defaults are /var/lib/containers/cache
// and /var/tmp).
//
// Usage: crio-import --root DIR --runroot DIR --driver overlay|vfs --policy FILE --tmp DIR
//
//	--cache DIR NAME ARCHIVE
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"go.podman.io/image/v5/copy"
	"go.podman.io/image/v5/signature"
	istorage "go.podman.io/image/v5/storage"
	"go.podman.io/image/v5/transports/alltransports"
	"go.podman.io/image/v5/types"
	"go.podman.io/storage"
	"go.podman.io/storage/pkg/reexec"
)

func main() {
	if reexec.Init() {
		return
	}
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "crio-import: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	root := flag.String("root", "", "containers-storage graph root (crio's root)")
	runroot := flag.String("runroot", "", "containers-storage run root (crio's runroot)")
	driver := flag.String("driver", "", "storage driver (crio's storage_driver)")
	policy := flag.String("policy", "", "signature policy file")
	tmp := flag.String("tmp", "", "directory for the extracted archive")
	cache := flag.String("cache", "", "directory of the blob-info cache")
	flag.Parse()
	if *root == "" || *runroot == "" || *driver == "" || *policy == "" || *tmp == "" || *cache == "" || flag.NArg() != 2 {
		return fmt.Errorf("usage: crio-import --root DIR --runroot DIR --driver NAME --policy FILE --tmp DIR --cache DIR NAME ARCHIVE")
	}
	name, archive := flag.Arg(0), flag.Arg(1)

	store, err := storage.GetStore(storage.StoreOptions{
		GraphRoot:       *root,
		RunRoot:         *runroot,
		GraphDriverName: *driver,
	})
	if err != nil {
		return fmt.Errorf("opening the storage at %s: %w", *root, err)
	}
	defer func() {
		if _, err := store.Shutdown(false); err != nil {
			fmt.Fprintf(os.Stderr, "crio-import: shutting the storage down: %v\n", err)
		}
	}()

	dest, err := istorage.Transport.ParseStoreReference(store, name)
	if err != nil {
		return fmt.Errorf("image name %q: %w", name, err)
	}
	src, err := alltransports.ParseImageName("oci-archive:" + archive)
	if err != nil {
		return fmt.Errorf("archive %q: %w", archive, err)
	}
	sys := &types.SystemContext{
		SignaturePolicyPath:  *policy,
		BigFilesTemporaryDir: *tmp,
		BlobInfoCacheDir:     *cache,
	}
	pol, err := signature.DefaultPolicy(sys)
	if err != nil {
		return fmt.Errorf("signature policy %s: %w", *policy, err)
	}
	pc, err := signature.NewPolicyContext(pol)
	if err != nil {
		return err
	}
	defer func() { _ = pc.Destroy() }()

	_, err = copy.Image(context.Background(), pc, dest, src, &copy.Options{SourceCtx: sys, DestinationCtx: sys})
	if err != nil {
		return fmt.Errorf("copying %s to %s: %w", archive, name, err)
	}
	return nil
}
