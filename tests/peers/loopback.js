// Force every net.Server.listen onto 127.0.0.1 (server-everything's HTTP modes bind all
// interfaces), and say on stderr which port each listener got, once it listens:
// "mcptape-test-upstream listening on port N". With PORT=0 the kernel chooses the port (one no
// other process has) and the tests read it from that line (server-everything says "port 0").
const net = require('net');
const orig = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  this.once('listening', () => {
    const a = this.address();
    if (a && typeof a === 'object') {
      process.stderr.write(`mcptape-test-upstream listening on port ${a.port}\n`);
    }
  });
  if (typeof args[0] === 'number' || typeof args[0] === 'string') {
    const port = args[0];
    const cb = args.find((a) => typeof a === 'function');
    return orig.call(this, { port: Number(port), host: '127.0.0.1' }, cb);
  }
  if (args[0] && typeof args[0] === 'object' && !args[0].path) {
    args[0] = Object.assign({}, args[0], { host: '127.0.0.1' });
  }
  return orig.apply(this, args);
};
