"""The leaf of posx: errors, atomic files, the lock, device and autocast, stop signals, progress, and
the process group of several ranks. Nothing here imports another posx package."""
