from workers.host.gpu import Capabilities, best_device, encoder_reason


def test_cycles_uses_optix_then_cuda_only_where_an_nvidia_gpu_is_listed() -> None:
    assert best_device(("CPU", "CUDA", "OPTIX"), ("NVIDIA L4",)) == "OPTIX"
    assert best_device(("CPU", "CUDA"), ("NVIDIA L4",)) == "CUDA"
    assert best_device(("CPU", "CUDA"), ()) == "CPU"


def test_a_worker_whose_blender_fails_takes_no_render_chunks() -> None:
    assert "render" not in Capabilities(blender_error="blender: not found").queues()
    assert "render" in Capabilities(blender_version="4.5.4").queues()


def test_heartbeat_fields_name_the_blender_and_what_it_can_do() -> None:
    caps = Capabilities(
        blender_version="4.5.4",
        blender_file_version=(4, 5, 91),
        engines=("BLENDER_EEVEE_NEXT", "BLENDER_WORKBENCH", "CYCLES"),
        devices=("CPU",),
        denoisers=("OPENIMAGEDENOISE",),
    ).to_json()
    assert caps["blender_version"] == "4.5.4"
    assert caps["blender_file_version"] == (4, 5, 91)
    assert caps["denoisers"] == ("OPENIMAGEDENOISE",)


# What ffmpeg printed on an NVIDIA H200 (driver 580.159.04, which has no NVENC engine), as read on
# this project's GPU host. 5.1 ends with its stream's error, 9.0 with "Nothing was written": the
# reason is what the encoder says under its own name.
FFMPEG_5_H200 = """\
[h264_nvenc @ 0x55a416a59240] OpenEncodeSessionEx failed: unsupported device (2): (no details)
[h264_nvenc @ 0x55a416a59240] No capable devices found
Error initializing output stream 0:0 -- Error while opening encoder for output stream #0:0 - maybe incorrect parameters such as bit_rate, rate, width or height
"""
FFMPEG_9_H200_OLD_DRIVER = """\
[h264_nvenc @ 0x562ef39081c0] Driver does not support the required nvenc API version. Required: 13.1 Found: 13.0
[h264_nvenc @ 0x562ef39081c0] The minimum required Nvidia driver for nvenc is 610.00 or newer
[vost#0:0/h264_nvenc @ 0x562ef3907d00] [enc:h264_nvenc @ 0x562ef3908140] Error while opening encoder - maybe incorrect parameters such as bit_rate, rate, width or height.
[vf#0:0 @ 0x562ef3923480] Error sending frames to consumers: Function not implemented
[vf#0:0 @ 0x562ef3923480] Task finished with error code: -38 (Function not implemented)
[out#0/null @ 0x557571dbc9c0] Nothing was written into output file, because at least one of its streams received no packets.
"""


def test_the_nvenc_reason_is_what_the_encoder_said_not_ffmpegs_last_line() -> None:
    assert encoder_reason(FFMPEG_5_H200, "h264_nvenc") == (
        "OpenEncodeSessionEx failed: unsupported device (2): (no details); No capable devices found"
    )
    assert encoder_reason(FFMPEG_9_H200_OLD_DRIVER, "h264_nvenc") == (
        "Driver does not support the required nvenc API version. Required: 13.1 Found: 13.0; "
        "The minimum required Nvidia driver for nvenc is 610.00 or newer"
    )


def test_without_the_encoders_own_words_the_reason_is_ffmpegs_first_line() -> None:
    assert encoder_reason("Unknown encoder 'h264_nvenc'\n", "h264_nvenc") == (
        "Unknown encoder 'h264_nvenc'"
    )
    assert encoder_reason("", "h264_nvenc") == "h264_nvenc failed"
