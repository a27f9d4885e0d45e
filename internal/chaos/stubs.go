package chaos

import "context"

func PoolExhaustion(ctx context.Context, env *Env, size Size) (*Result, error)    { return nil, errSkipped }
func Poison(ctx context.Context, env *Env, size Size) (*Result, error)            { return nil, errSkipped }
func NotifyPressure(ctx context.Context, env *Env, size Size) (*Result, error)    { return nil, errSkipped }
