"""The leaf of posx: errors, atomic files, the one lock, device and autocast, stop signals,
progress, and the process group of several ranks (distributed). Nothing here imports another
posx package."""
