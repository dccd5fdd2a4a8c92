"""The discounted sum as a CPU loop over time, on the ``[T, B_hi, B_lo]`` views the CPU path
hands an op's loop (absent inputs are ``None``)."""


def run(layout, arrays, scalars, outs, dtype):
    x, dones, init = arrays
    (out,) = outs
    gamma = dtype(scalars[0])
    for t in range(x.shape[0]):
        if t == 0:
            out[0] = x[0] if init is None else x[0] + init[0]
        else:
            decay = gamma if dones is None else gamma * (dones[t - 1] == 0)
            out[t] = x[t] + decay * out[t - 1]
