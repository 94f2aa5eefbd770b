"""Builds scenes/demo.blend: a camera flying around lit objects, 120 frames at 24 fps.

Run with the oldest Blender the farm supports (3.4), so every newer Blender opens the file:
    blender --background --factory-startup --python scenes/build_demo.py -- scenes/demo.blend
"""

import math
import sys

import bpy

out = sys.argv[sys.argv.index("--") + 1] if "--" in sys.argv else "demo.blend"

bpy.ops.wm.read_factory_settings(use_empty=True)
scene = bpy.context.scene
scene.render.engine = "CYCLES"
scene.cycles.samples = 16
scene.cycles.use_denoising = False
scene.render.fps = 24
scene.frame_start = 1
scene.frame_end = 120
scene.render.resolution_x = 1280
scene.render.resolution_y = 720

world = bpy.data.worlds.new("World")
scene.world = world
world.use_nodes = True
world.node_tree.nodes["Background"].inputs[0].default_value = (0.05, 0.07, 0.12, 1.0)
world.node_tree.nodes["Background"].inputs[1].default_value = 0.6


def material(name, rgb, metallic=0.0, roughness=0.4, emission=0.0):
    mat = bpy.data.materials.new(name)
    mat.use_nodes = True
    bsdf = mat.node_tree.nodes["Principled BSDF"]
    bsdf.inputs["Base Color"].default_value = (*rgb, 1.0)
    bsdf.inputs["Metallic"].default_value = metallic
    bsdf.inputs["Roughness"].default_value = roughness
    if emission:
        bsdf.inputs["Emission"].default_value = (*rgb, 1.0)
        bsdf.inputs["Emission Strength"].default_value = emission
    return mat


bpy.ops.mesh.primitive_plane_add(size=30, location=(0, 0, 0))
bpy.context.object.data.materials.append(material("Floor", (0.35, 0.35, 0.38), roughness=0.8))

colours = [
    (0.9, 0.2, 0.15),
    (0.15, 0.6, 0.9),
    (0.95, 0.75, 0.1),
    (0.3, 0.85, 0.35),
    (0.8, 0.3, 0.9),
]
for i, rgb in enumerate(colours):
    angle = 2 * math.pi * i / len(colours)
    x, y = 3.2 * math.cos(angle), 3.2 * math.sin(angle)
    if i % 2:
        bpy.ops.mesh.primitive_uv_sphere_add(
            radius=0.9, location=(x, y, 0.9), segments=48, ring_count=24
        )
        bpy.ops.object.shade_smooth()
    else:
        bpy.ops.mesh.primitive_cube_add(size=1.4, location=(x, y, 0.7), rotation=(0, 0, angle))
    bpy.context.object.data.materials.append(material(f"M{i}", rgb, metallic=0.3 * (i % 2)))

bpy.ops.mesh.primitive_torus_add(location=(0, 0, 1.2), major_radius=1.1, minor_radius=0.25)
torus = bpy.context.object
torus.data.materials.append(material("Glow", (1.0, 0.55, 0.2), emission=3.0))
torus.rotation_euler = (math.radians(60), 0, 0)
torus.keyframe_insert("rotation_euler", frame=1)
torus.rotation_euler = (math.radians(60), 0, math.radians(360))
torus.keyframe_insert("rotation_euler", frame=120)

bpy.ops.object.light_add(
    type="SUN", location=(5, -5, 10), rotation=(math.radians(40), 0, math.radians(35))
)
bpy.context.object.data.energy = 3.0
bpy.ops.object.light_add(type="AREA", location=(-4, 4, 6))
bpy.context.object.data.energy = 600
bpy.context.object.data.size = 4

bpy.ops.object.empty_add(location=(0, 0, 0.8))
target = bpy.context.object
bpy.ops.object.camera_add()
camera = bpy.context.object
scene.camera = camera
track = camera.constraints.new("TRACK_TO")
track.target = target
track.track_axis = "TRACK_NEGATIVE_Z"
track.up_axis = "UP_Y"
for frame in range(1, 121, 10):
    t = (frame - 1) / 119.0
    angle = 2 * math.pi * t
    camera.location = (9 * math.cos(angle), 9 * math.sin(angle), 3.5 + 1.5 * math.sin(2 * angle))
    camera.keyframe_insert("location", frame=frame)

for fcurve in camera.animation_data.action.fcurves:
    for point in fcurve.keyframe_points:
        point.interpolation = "BEZIER"
for fcurve in torus.animation_data.action.fcurves:
    for point in fcurve.keyframe_points:
        point.interpolation = "LINEAR"

bpy.ops.wm.save_as_mainfile(filepath=out, compress=False)
print(f"saved {out}")
