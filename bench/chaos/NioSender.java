// The chaos suite's Java NIO sender: a SocketChannel writes the pattern of
// bench/chaos/agents.py (byte i is (j * 131 + 17) & 0xff with j = i % 65521)
// for S seconds, closes, and prints {"bytes": N} (the bytes write() took).
// Under flowtune-run the shim sees SocketChannel.write as write(2).
//
//   java -cp DIR NioSender HOST PORT SECONDS
// Exit status 0, or 1 with {"bytes": N, "error": "..."} on an I/O error.
import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;

public final class NioSender {
  private static final int PERIOD = 65521;
  private static final int CHUNK = 256 * 1024;

  public static void main(String[] args) {
    String host = args[0];
    int port = Integer.parseInt(args[1]);
    long endNs = System.nanoTime() + (long) (Double.parseDouble(args[2]) * 1e9);
    // A window holding the pattern from any offset for one chunk.
    byte[] window = new byte[PERIOD * (CHUNK / PERIOD + 2)];
    for (int i = 0; i < window.length; i++) {
      window[i] = (byte) (((i % PERIOD) * 131 + 17) & 0xff);
    }
    ByteBuffer buf = ByteBuffer.allocateDirect(window.length);
    buf.put(window);
    long sent = 0;
    try (SocketChannel ch = SocketChannel.open(new InetSocketAddress(host, port))) {
      while (System.nanoTime() < endNs) {
        int o = (int) (sent % PERIOD);
        buf.limit(o + CHUNK).position(o);
        while (buf.hasRemaining()) {
          sent += ch.write(buf);
        }
      }
    } catch (IOException e) {
      System.out.println("{\"bytes\": " + sent + ", \"error\": \""
          + String.valueOf(e.getMessage()).replace("\\", "\\\\").replace("\"", "'") + "\"}");
      System.exit(1);
    }
    System.out.println("{\"bytes\": " + sent + "}");
  }
}
