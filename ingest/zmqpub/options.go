package zmqpub

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
)

// Options configures a Publisher.
type Options struct {
	// Endpoint is the PUB socket's listen address, e.g. "tcp://*:5557" (vLLM's default) or
	// "tcp://127.0.0.1:0" for an ephemeral port. Required.
	Endpoint string
	// ReplayEndpoint is the ROUTER replay socket's listen address, e.g. "tcp://*:5558". Empty: no
	// replay socket (subscribers cannot recover gaps).
	ReplayEndpoint string
	// Topic is the first frame of every message. Default "" (vLLM's default).
	Topic string
	// BufferSteps is how many recent messages the replay buffer keeps (count). Default 10000
	// (vLLM's buffer_steps).
	BufferSteps int
	// HWM is how many messages the PUB socket queues for slow subscribers before dropping new ones
	// (count). Default 100000 (vLLM's hwm).
	HWM int
	// Logger receives replay-protocol warnings. Default slog.Default().
	Logger *slog.Logger
}

func (o *Options) setDefaults() {
	if o.BufferSteps == 0 {
		o.BufferSteps = 10000
	}
	if o.HWM == 0 {
		o.HWM = 100000
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Validate reports the first invalid field (after defaults are applied to zero values).
func (o Options) Validate() error {
	o.setDefaults()
	var errs []error
	if !strings.HasPrefix(o.Endpoint, "tcp://") && !strings.HasPrefix(o.Endpoint, "ipc://") {
		errs = append(errs, fmt.Errorf("endpoint %q: want tcp://host:port or ipc://path", o.Endpoint))
	}
	if o.ReplayEndpoint != "" && !strings.HasPrefix(o.ReplayEndpoint, "tcp://") && !strings.HasPrefix(o.ReplayEndpoint, "ipc://") {
		errs = append(errs, fmt.Errorf("replay endpoint %q: want tcp://host:port or ipc://path", o.ReplayEndpoint))
	}
	if o.BufferSteps < 0 {
		errs = append(errs, fmt.Errorf("buffer steps %d: must be >= 0", o.BufferSteps))
	}
	if o.HWM < 0 {
		errs = append(errs, fmt.Errorf("hwm %d: must be >= 0", o.HWM))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("zmqpub: options: %w", err)
	}
	return nil
}
