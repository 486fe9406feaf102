"""image_rotate: decode a JPEG, rotate it by 90 degrees and encode it again with
Pillow (FunctionBench / vHive `image_rotate`, TOSS `image_processing`, PASS "Image")."""
import hashlib
import io

from PIL import Image


def init():
    # Load the codec plugins now so that they are part of the snapshot.
    Image.init()


def handler(event):
    with open(event["path"], "rb") as f:
        data = f.read()
    img = Image.open(io.BytesIO(data))
    img = img.convert("RGB")
    rotated = img.transpose(Image.Transpose.ROTATE_90)
    out = io.BytesIO()
    rotated.save(out, format="JPEG", quality=85)
    w, h = rotated.size
    probes = []
    for x, y in event.get("probes", []):
        probes.append([x, y, list(rotated.getpixel((x, y)))])
    return {
        "input_size": list(img.size),
        "output_size": [w, h],
        "pixels_sha256": hashlib.sha256(rotated.tobytes()).hexdigest(),
        "jpeg_bytes": len(out.getvalue()),
        "probes": probes,
    }
