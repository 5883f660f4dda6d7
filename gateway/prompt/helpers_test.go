package prompt

import "errors"

func asTemplateError(err error, te **templateError) bool { return errors.As(err, te) }
