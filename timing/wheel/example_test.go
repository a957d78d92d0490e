package wheel_test

import (
	"fmt"

	"github.com/hourglass/hourglass/timing/wheel"
)

// The worked example of the package documentation: a caller that sleeps
// until NextDeadline sees the clock step through the slots that c cascades
// through on its way down to level 0.
func Example() {
	w := wheel.New(0)
	w.Add(1, 50)     // level 0, slot 50
	w.Add(2, 1000)   // level 1, slot 15
	w.Add(3, 300000) // level 3, slot 1
	fire := func(id uint64, deadline int64) {
		fmt.Printf("  fired %d, due at %d\n", id, deadline)
	}

	fmt.Println("advance to 1000")
	w.Advance(1000, fire)
	for w.Len() > 0 {
		next, _ := w.NextDeadline()
		fmt.Println("advance to", next)
		w.Advance(next, fire)
	}
	// Output:
	// advance to 1000
	//   fired 1, due at 50
	//   fired 2, due at 1000
	// advance to 262144
	// advance to 299008
	// advance to 299968
	// advance to 300000
	//   fired 3, due at 300000
}
