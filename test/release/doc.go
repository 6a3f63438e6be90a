// Package release holds the tests of what `make release` ships
// (docs/releasing.md): the manager image (its layers, its config, the
// binary in it running as the non-root user, two builds of a commit giving
// one digest, a push to a registry and a pull back), the docker/kind
// archives, the SBOMs, the chart pinned to the image's digest, the plugin
// archives and their krew manifest, and checksums.txt. TestMain runs `make
// release` once, into a temporary directory, and every test reads what it
// built: cross-compiling the manager for linux/arm64 is the expensive part
// and happens once per `make test`.
//
// The darwin plugin archives are left out unless AGENTRUN_TEST_RELEASE_ALL=1
// (they compile the plugin's dependencies twice more, for nothing the other
// platforms do not test); `make release` itself always builds them.
// AGENTRUN_TEST_RELEASE_PLATFORMS="linux/amd64" narrows the image (and the
// plugin archives) to one platform, leaving out the linux/arm64 build of
// the manager, the cost of this package on a cold build cache.
package release
