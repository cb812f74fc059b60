package actionspace

import (
	"fmt"
	"math"
)

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }

// straightHistory is n poses one dt apart at constant speed along heading
// psi, the last at the origin with height z.
func straightHistory(n int, speed, psi float64, z float32) ([][3]float32, [][9]float32) {
	xyz := make([][3]float32, n)
	rot := make([][9]float32, n)
	for k := range n {
		s := -speed * 0.1 * float64(n-1-k)
		xyz[k] = [3]float32{float32(s * math.Cos(psi)), float32(s * math.Sin(psi)), z}
		rot[k] = YawRotation(float32(psi))
	}
	return xyz, rot
}
