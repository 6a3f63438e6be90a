package imagebuild

import (
	"context"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Push writes idx, its images and their blobs to the registry under tag,
// with the credentials `docker login` (or a credential helper) left in the
// Docker config (authn.DefaultKeychain), and returns the reference by
// digest that was pushed. A registry on localhost or 127.0.0.1 is spoken
// to over plain HTTP (go-containerregistry's rule), others over HTTPS.
func Push(ctx context.Context, idx v1.ImageIndex, tag name.Tag) (name.Digest, error) {
	if err := remote.WriteIndex(tag, idx, remote.WithAuthFromKeychain(authn.DefaultKeychain), remote.WithContext(ctx)); err != nil {
		return name.Digest{}, err
	}
	d, err := idx.Digest()
	if err != nil {
		return name.Digest{}, err
	}
	return tag.Context().Digest(d.String()), nil
}
