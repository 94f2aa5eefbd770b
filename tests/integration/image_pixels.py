"""Dumps an image's stored pixels as a .npy (float32, rows from the top), for the tests to compare
(run with the bpy wheel, not imported): python -I tests/integration/image_pixels.py IMAGE OUT.npy"""

import sys

import bpy
import numpy

image = bpy.data.images.load(sys.argv[1])
image.colorspace_settings.is_data = True
pixels = numpy.empty(len(image.pixels), dtype=numpy.float32)
image.pixels.foreach_get(pixels)
width, height = image.size
numpy.save(sys.argv[2], pixels.reshape((height, width, image.channels))[::-1])
