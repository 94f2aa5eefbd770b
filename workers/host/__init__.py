"""What a worker knows and keeps about its host: the GPU and its encoder (gpu), the bubblewrap box
Blender and ffmpeg run in (box), a render and an encode side by side (alongside), spot notices
(spot) and a warm Blender held between chunks (warm, serving)."""
