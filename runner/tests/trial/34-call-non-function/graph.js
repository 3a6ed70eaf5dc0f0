export const meta = {name: 'call-non-function', slug: 'call-non-function', version: '1'};
export default async function (args, g) {
  return args.handler(1);
}
