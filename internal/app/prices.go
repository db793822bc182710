package app

import (
	"flag"
	"fmt"
	"strings"

	"github.com/gpuxray/gpuxray/report"
)

// priceOptions are the report's price flags: --price GPU_TYPE=AMOUNT
// (repeatable; a comma-separated list from the environment), --currency
// and --price.file.
type priceOptions struct {
	file, currency string
	prices         map[string]float64
}

func priceFlags(fs *flag.FlagSet) *priceOptions {
	p := &priceOptions{prices: map[string]float64{}}
	fs.Func("price", "price of a GPU-hour: GPU_TYPE=AMOUNT, GPU_TYPE being the GFD product label (NVIDIA-H100-80GB-HBM3) or * for every other type; repeatable, and it replaces --price.file's price of that type", p.setPrice)
	fs.StringVar(&p.currency, "currency", "", "currency of the prices, an ISO 4217 code (default USD, or the price file's)")
	fs.StringVar(&p.file, "price.file", "", "prices of owned GPUs (docs/report.md, Money): per GPU type a purchase_price and amortization_years, power_per_kwh for the energy gpuxray measures, per_hour for other costs")
	return p
}

func (p *priceOptions) setPrice(v string) error {
	for _, one := range strings.Split(v, ",") {
		k, amount, err := report.ParsePrice(one)
		if err != nil {
			return err
		}
		if _, dup := p.prices[k]; dup {
			return fmt.Errorf("%s is priced twice", k)
		}
		p.prices[k] = amount
	}
	return nil
}

// sheet is the prices the flags give: the file's, with each --price
// replacing its type's; in --currency, else the file's, else USD. p must
// be valid.
func (p *priceOptions) sheet() (report.PriceSheet, error) {
	s := report.PriceSheet{Types: map[string]report.Price{}}
	if p.file != "" {
		var err error
		if s, err = report.LoadPriceFile(p.file); err != nil {
			return s, usagef("--price.file: %v", err)
		}
	}
	for k, amount := range p.prices {
		s.Types[k] = report.Price{PerHour: amount}
	}
	switch {
	case p.currency != "":
		s.Currency = p.currency
	case s.Currency == "":
		s.Currency = report.DefaultCurrency
	}
	return s, nil
}

// Validate checks --currency; the price file is checked as it is read.
func (p *priceOptions) Validate() error {
	if p.currency != "" && !report.ValidCurrency(p.currency) {
		return usagef("--currency %q is not a three-letter ISO 4217 code such as USD, EUR or JPY", p.currency)
	}
	return nil
}
