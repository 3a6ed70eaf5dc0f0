export const meta = {name: 'throw-string', slug: 'throw-string', version: '1'};
export default async function (args, g) {
  throw "bad config";
}
