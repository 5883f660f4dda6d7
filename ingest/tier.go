package ingest

import (
	"strings"

	"github.com/kvrouter/kvrouter/statestore"
)

// TierOf maps an engine's medium name to a storage tier (SPEC §4.1), case-insensitively. The empty
// medium (not sent) is the device; an unknown name is also the device, with known false so the caller
// can count it. Beyond SPEC §4.1's names, SGLang's "EXTERNAL" (StorageMedium.EXTERNAL: HiCache's
// shared or remote pool, e.g. Mooncake) is the disk tier: the slowest tier kvrouter ranks, which is
// where a remote pool's fetch cost belongs — never the device, which would overstate the worker's cache.
func TierOf(medium string) (tier statestore.Tier, known bool) {
	switch strings.ToUpper(medium) {
	case "", "GPU", "DEVICE":
		return statestore.TierDevice, true
	case "CPU", "CPU_PINNED", "CPU_TIER1":
		return statestore.TierHost, true
	case "DISK", "NVME", "CPU_TIER2", "EXTERNAL":
		return statestore.TierDisk, true
	}
	return statestore.TierDevice, false
}
