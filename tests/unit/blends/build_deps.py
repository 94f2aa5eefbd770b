"""Builds tests/unit/blends/deps/: a scene using a texture, UDIM tiles, an image sequence, a sound
and a library that links another library and has a texture of its own.

    blender --background --factory-startup --python tests/unit/blends/build_deps.py
"""

import os
import shutil

import bpy

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "deps")
PNG = os.path.join(os.path.dirname(HERE), "..", "..", "..", "scenes", "tex", "checker.png")
for sub in ("tex", "seq", "lib", "audio"):
    os.makedirs(os.path.join(HERE, sub), exist_ok=True)
for name in ("tex/checker.png", "tex/wood.1001.png", "tex/wood.1002.png", "lib/inner.png"):
    shutil.copyfile(PNG, os.path.join(HERE, name))
for frame in (1, 2, 3):
    shutil.copyfile(PNG, os.path.join(HERE, "seq", f"f_{frame:04d}.png"))
with open(os.path.join(HERE, "audio", "beep.wav"), "wb") as fh:
    fh.write(b"RIFF\x24\x00\x00\x00WAVEfmt ")  # never played; only traced


def image_material(name, path, source="FILE"):
    img = bpy.data.images.new(name, 4, 4)
    img.source = source
    img.filepath = path
    mat = bpy.data.materials.new(name)
    mat.use_nodes = True
    node = mat.node_tree.nodes.new("ShaderNodeTexImage")
    node.image = img
    return mat


def mesh_with(name, mat):
    bpy.ops.mesh.primitive_plane_add()
    obj = bpy.context.object
    obj.name = name
    obj.data.materials.append(mat)
    return obj


def save(path):
    bpy.ops.wm.save_as_mainfile(
        filepath=os.path.join(HERE, path), compress=True, relative_remap=False
    )


bpy.ops.wm.read_factory_settings(use_empty=True)
mesh_with("Inner", image_material("inner", "//inner.png"))
save("lib/inner.blend")

bpy.ops.wm.read_factory_settings(use_empty=True)
with bpy.data.libraries.load(os.path.join(HERE, "lib", "inner.blend"), link=True) as (src, dst):
    dst.objects = ["Inner"]
bpy.context.scene.collection.objects.link(dst.objects[0])
bpy.data.libraries[0].filepath = "//inner.blend"
outer = mesh_with("Outer", image_material("outer", "//../tex/checker.png"))
group = bpy.data.collections.new("PropSet")
group.objects.link(outer)
group.objects.link(dst.objects[0])
bpy.context.scene.collection.children.link(group)
save("lib/outer.blend")

bpy.ops.wm.read_factory_settings(use_empty=True)
scene = bpy.context.scene
mesh_with("Plain", image_material("plain", "//tex/checker.png"))
mesh_with("Udim", image_material("udim", "//tex/wood.<UDIM>.png", "TILED"))
mesh_with("Seq", image_material("seq", "//seq/f_0001.png", "SEQUENCE"))
sound = bpy.data.sounds.load(os.path.join(HERE, "audio", "beep.wav"), check_existing=False)
sound.filepath = "//audio/beep.wav"
sound.use_fake_user = True
with bpy.data.libraries.load(os.path.join(HERE, "lib", "outer.blend"), link=True) as (src, dst):
    dst.collections = ["PropSet"]
holder = bpy.data.objects.new("PropSet", None)
holder.instance_type = "COLLECTION"
holder.instance_collection = dst.collections[0]
scene.collection.objects.link(holder)
for lib in bpy.data.libraries:
    lib.filepath = "//lib/" + os.path.basename(lib.filepath)
save("shot.blend")
