package hourglass

// Product is a SKU and its stock. Available+Reserved+Sold changes only when
// the products API sets Available; orders only move units between the three.
type Product struct {
	SKU       string
	Name      string
	Category  string
	Available int64
	Reserved  int64
	Sold      int64
}

// MaxSKULength is the longest SKU accepted.
const MaxSKULength = 64

// ValidateSKU checks that sku is 1..64 characters of A-Za-z0-9._-.
func ValidateSKU(sku string) error {
	if sku == "" || len(sku) > MaxSKULength {
		return Errorf(CodeInvalidArgument, "sku: must be 1 to %d characters of A-Za-z0-9._-, got %d characters", MaxSKULength, len(sku))
	}
	for i := 0; i < len(sku); i++ {
		c := sku[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			return Errorf(CodeInvalidArgument, "sku: %q has a character outside A-Za-z0-9._-", sku)
		}
	}
	return nil
}

// ValidateProduct checks a product as the products API sets it; its name
// and category must be text (CheckText).
func ValidateProduct(p Product) error {
	if err := ValidateSKU(p.SKU); err != nil {
		return err
	}
	if len(p.Name) > 256 {
		return Errorf(CodeInvalidArgument, "name: at most 256 bytes, got %d", len(p.Name))
	}
	if len(p.Category) > 64 {
		return Errorf(CodeInvalidArgument, "category: at most 64 bytes, got %d", len(p.Category))
	}
	if err := CheckText("name", p.Name); err != nil {
		return err
	}
	if err := CheckText("category", p.Category); err != nil {
		return err
	}
	if p.Available < 0 {
		return Errorf(CodeInvalidArgument, "available: must be >= 0, got %d", p.Available)
	}
	if p.Available > 1<<50 {
		return Errorf(CodeInvalidArgument, "available: must be <= %d, got %d", int64(1)<<50, p.Available)
	}
	return nil
}
