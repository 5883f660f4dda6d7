package prompt

import (
	"errors"
	"strconv"
)

func asTemplateError(err error, te **templateError) bool { return errors.As(err, te) }

func strconvQuote(s string) string { return strconv.Quote(s) }
func itoa(n int) string            { return strconv.Itoa(n) }
