package cuda

import (
	"fmt"

	"vlanode/cuda/driver"
)

// DeviceUUIDs returns the UUID of each CUDA device, by ordinal: the devices
// this process sees, numbered as CUDA_VISIBLE_DEVICES leaves them. NVML
// numbers every GPU of the machine, so a UUID is how the two are matched.
func DeviceUUIDs() ([]string, error) {
	d, err := driver.OpenDriver()
	if err != nil {
		return nil, err
	}
	defer d.Close()
	if err := d.Init(); err != nil {
		return nil, fmt.Errorf("cuda: the NVIDIA driver did not initialize: %w", err)
	}
	n, err := d.DeviceCount()
	if err != nil {
		return nil, fmt.Errorf("cuda: counting devices: %w", err)
	}
	out := make([]string, n)
	for i := range out {
		dev, err := d.Device(i)
		if err != nil {
			return nil, fmt.Errorf("cuda: device %d: %w", i, err)
		}
		if out[i], err = d.DeviceUUID(dev); err != nil {
			return nil, fmt.Errorf("cuda: device %d: %w", i, err)
		}
	}
	return out, nil
}
