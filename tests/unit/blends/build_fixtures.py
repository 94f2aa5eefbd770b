"""Builds the small .blend files tests/unit/test_blendfile.py reads, each with known settings.

    blender --background --factory-startup --python tests/unit/blends/build_fixtures.py
Saved zstd-compressed (as artists' files often are), with Blender 3.4, the oldest the farm reads.
"""

import os

import bpy

HERE = os.path.dirname(os.path.abspath(__file__))


def fresh():
    bpy.ops.wm.read_factory_settings(use_empty=True)
    return bpy.context.scene


def camera(scene, name):
    cam = bpy.data.objects.new(name, bpy.data.cameras.new(name))
    scene.collection.objects.link(cam)
    scene.camera = cam


def save(name):
    bpy.ops.wm.save_as_mainfile(filepath=os.path.join(HERE, name), compress=True)


# Cycles at 23.976 with frame step, half-size 1080p, denoising left at its default, multilayer EXR.
scene = fresh()
scene.name = "Shot"
scene.render.engine = "CYCLES"
scene.cycles.samples = 128
scene.frame_start, scene.frame_end, scene.frame_step = 1001, 1048, 2
scene.render.fps, scene.render.fps_base = 24, 1.001
scene.render.resolution_x, scene.render.resolution_y = 1920, 1080
scene.render.resolution_percentage = 50
scene.render.image_settings.file_format = "OPEN_EXR_MULTILAYER"
scene.render.image_settings.color_depth = "32"
scene.render.image_settings.color_mode = "RGBA"
scene.view_layers[0].name = "Beauty"
extra = scene.view_layers.new("Mattes")
off = scene.view_layers.new("Scratch")
off.use = False
camera(scene, "CamA")
save("cycles_2398.blend")

# Eevee at 29.97, an odd size at 100%, 16-bit RGBA PNG.
scene = fresh()
scene.render.engine = "BLENDER_EEVEE"
scene.eevee.taa_render_samples = 16
scene.frame_start, scene.frame_end = 1, 30
scene.render.fps, scene.render.fps_base = 30, 1.001
scene.render.resolution_x, scene.render.resolution_y = 1001, 563
scene.render.resolution_percentage = 100
scene.render.image_settings.file_format = "PNG"
scene.render.image_settings.color_depth = "16"
scene.render.image_settings.color_mode = "RGBA"
camera(scene, "CamE")
save("eevee_2997.blend")

# Workbench, no camera, half-float EXR RGB, Cycles denoising switched off then engine changed.
scene = fresh()
scene.cycles.use_denoising = False
scene.render.engine = "BLENDER_WORKBENCH"
scene.frame_start, scene.frame_end = 5, 5
scene.render.fps, scene.render.fps_base = 50, 1.0
scene.render.resolution_x, scene.render.resolution_y = 640, 360
scene.render.resolution_percentage = 200
scene.render.image_settings.file_format = "OPEN_EXR"
scene.render.image_settings.color_depth = "16"
scene.render.image_settings.color_mode = "RGB"
save("workbench.blend")
