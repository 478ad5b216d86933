# The init container of `--source init`: fetch URL, check its sha256 (when given), unpack it into DEST.
# Standard library only: it runs on the serving image's python3, and `tritonize k8s render` puts this file in the
# manifest byte for byte. Usage: python3 -c SCRIPT URL DEST HEALTH_FILE [SHA256]
import hashlib, pathlib, sys, tarfile, tempfile, urllib.request

url, dest, health_file = sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[3]
want = sys.argv[4].lower() if len(sys.argv) > 4 else ""
digest = hashlib.sha256()
with tempfile.TemporaryFile() as archive:
    with urllib.request.urlopen(url, timeout=60) as answer:
        for chunk in iter(lambda: answer.read(1 << 20), b""):
            digest.update(chunk)
            archive.write(chunk)
    if want and digest.hexdigest() != want:
        sys.exit(f"{url}: sha256 {digest.hexdigest()}, expected {want}")
    archive.seek(0)
    with tarfile.open(fileobj=archive, mode="r:*") as tar:
        tar.extractall(dest, filter="data")  # no absolute paths, links out of dest or device files
if not (dest / health_file).is_file():
    sys.exit(f"{url} holds no {health_file} at its top; make it with: tar -C REPOSITORY -czf repository.tar.gz .")
print(f"repository from {url} in {dest} (sha256 {digest.hexdigest()})")
