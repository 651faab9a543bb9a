"""The leaf of posx: errors, atomic files, the one lock, device and autocast, stop signals,
progress. Nothing here imports another posx package."""
